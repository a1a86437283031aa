"""The vacuum fallback: the leader vacuums the job table when the server does not.

A job table is a hot queue: every job is inserted, updated twice and deleted,
and on PostgreSQL each leaves a dead row version that claims walk past until a
vacuum clears it. due asks autovacuum to run often on `due_jobs` (migration
0009), but a server may run it rarely, or not at all; every few seconds the
leader looks at the table's dead rows and vacuums when they pass a bound
(store/jobs.py's vacuum_if_needed). SQLite needs none of this.

A vacuum cannot clear rows an older snapshot may still see (a long transaction,
a replica's feedback): when two in a row cleared less than half, the next
waits a minute, then two, up to half an hour, instead of scanning the table
every few seconds for nothing; one that clears resets the wait. Not after one
alone: a backend reports its deletes to the statistics up to seconds after
it commits, so the count read after a vacuum that followed a prune may hold
rows the vacuum never saw as dead (a 30-minute soak saw one such false
alarm, and dead rows reach 175,000 during the minute it waited). The vacuum never runs
during a round of the pruner (they share a lock): rows the pruner deleted
while a vacuum ran would count as rows it could not clear, and a soak at
1,000 jobs/s saw the vacuum wait a minute, and dead rows pass 160,000, for
that alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from due.clock import Clock
from due.logs import event
from due.service import Calls
from due.store import Store

log = logging.getLogger("due.maintenance")
VACUUM_CHECK_SECONDS = 10.0
FIRST_WAIT_SECONDS = 60.0
LONGEST_WAIT_SECONDS = 1800.0


class Vacuum:
    def __init__(
        self,
        *,
        store: Store,
        call: Calls,
        leading: Callable[[], bool],
        clock: Clock,
        table_work: asyncio.Lock | None = None,
    ) -> None:
        self._store = store
        self._call = call
        self._leading = leading
        self._clock = clock
        self._table_work = table_work or asyncio.Lock()
        self._not_before = float("-inf")
        self._wait = FIRST_WAIT_SECONDS
        self._held_back = 0
        """Vacuums in a row that cleared less than half."""

    def interval(self) -> float:
        return VACUUM_CHECK_SECONDS

    async def run_once(self) -> bool:
        """Whether the table was vacuumed."""
        if not self._leading() or self._clock.monotonic() < self._not_before:
            return False
        async with self._table_work:  # not while the pruner deletes
            vacuumed = await self._call(self._store.job_vacuum_if_needed)
        if vacuumed is None:
            return False
        event(log, "maintenance.vacuumed", table="due_jobs", **vacuumed)
        after = vacuumed["dead_after"]
        if after is None or after * 2 <= vacuumed["dead"]:
            self._held_back, self._wait = 0, FIRST_WAIT_SECONDS
            return True
        self._held_back += 1
        if self._held_back >= 2:  # once may be the statistics lagging behind
            event(
                log,
                "maintenance.vacuum_held_back",
                logging.WARNING,
                table="due_jobs",
                dead=after,
                next_in=self._wait,
                hint="an old snapshot keeps the dead rows: a long transaction, or a "
                "replica's hot_standby_feedback (see pg_stat_activity.backend_xmin)",
            )
            self._not_before = self._clock.monotonic() + self._wait
            self._wait = min(self._wait * 2, LONGEST_WAIT_SECONDS)
        return True
