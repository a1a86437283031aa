"""Value types at the bottom of due: jobs, the records that cross the store's
boundary, schedules and their timing.

Nothing here imports any module of due above it (only `due.errors`,
`due.durations`, `due.payload` and `due.clock`, themselves leaves): the store,
the scheduler, the worker and the App all depend on these types, never the
other way round (`scripts/check-boundaries`).
"""
