"""An app's schedules: those defined in code, and those stored at run time.

`App.schedule(...)` and its siblings delegate here (the App keeps one screen
per concern): definitions are checked against the app's tasks when they are
made (scheduler/registration.py), code-defined ones are synced to the
database by each worker at start, and run-time ones go straight to it.

A sync adds the schedules this code defines and writes those whose
definition changed; it never disables one this code does not define.
During a rolling deploy old and new code start side by side, and a process
restarted from the old code cannot tell a schedule the new code added from
one the old code removed: disabling at sync would let it switch off the new
schedules until the next start of new code. So a schedule gone from the code
keeps firing (each worker logs `schedule.not_in_code` as it starts) until
`prune` — `due schedule prune`, run once every process runs the new code —
disables it. This is what queues that keep their periodic jobs in code do:
Oban, River and Procrastinate never let one node's boot switch off what
another node's code defines.

A definition change is not free of past-due times either: the times already
due under the stored definition are settled under it first (run, or recorded
as skipped or missed by its policies), in the transaction that writes the new
one, which then fires from its first time after the change. Every scheduled
time stays accounted for, whichever code writes last.
"""

from __future__ import annotations

from collections.abc import Callable

from due.core.schedules import Schedule, ScheduleOverview, ScheduleRun, SyncReport
from due.errors import ConfigurationError, ScheduleNotFoundError
from due.scheduler.service import decide
from due.store import Store


class ScheduleCatalog:
    def __init__(self, *, store: Callable[[], Store]) -> None:
        self._store = store
        self.defined: dict[str, Schedule] = {}
        """The schedules defined in code, by name."""

    def define(self, schedule: Schedule) -> Schedule:
        if schedule.name in self.defined:
            raise ConfigurationError(f"a schedule named {schedule.name!r} is already defined")
        self.defined[schedule.name] = schedule
        return schedule

    def add(self, schedule: Schedule) -> Schedule:
        self._store().schedule_add(schedule)
        return schedule

    def sync(self) -> SyncReport:
        return self._store().schedule_sync(list(self.defined.values()), decide)

    def prune(self) -> list[str]:
        """Disable the code schedules this code no longer defines; their names."""
        return self._store().schedule_prune(list(self.defined), decide)

    def overview(self) -> list[ScheduleOverview]:
        return self._store().schedule_overview()

    def runs(self, name: str, limit: int) -> list[ScheduleRun]:
        store = self._store()
        runs = store.schedule_runs(name, limit)
        if not runs and name not in {s.name for s in store.schedule_list()}:
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
        return runs

    def pause(self, name: str, paused: bool) -> None:
        if not self._store().schedule_pause(name, paused):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")

    def trigger(self, name: str) -> int:
        """Start a run now; its job id."""
        return self._store().schedule_trigger(name)

    def remove(self, name: str) -> None:
        if name in self.defined:
            raise ConfigurationError(
                f"schedule {name!r} is defined in code: delete it there, then run "
                "`due schedule prune` once every worker runs that code; or pause it"
            )
        if not self._store().schedule_remove(name):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
