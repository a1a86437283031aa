"""The vacuum fallback: the leader vacuums the job table when the server does not.

A job table is a hot queue: every job is inserted, updated twice and deleted,
and on PostgreSQL each leaves a dead row version that claims walk past until a
vacuum clears it. due asks autovacuum to run often on `due_jobs` (migration
0009), but a server may run it rarely, or not at all; every few seconds the
leader looks at the table's dead rows and vacuums when they pass a bound
(store/jobs.py's vacuum_if_needed). SQLite needs none of this.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from due.logs import event
from due.service import Calls
from due.store import Store

log = logging.getLogger("due.maintenance")
VACUUM_CHECK_SECONDS = 10.0


class Vacuum:
    def __init__(self, *, store: Store, call: Calls, leading: Callable[[], bool]) -> None:
        self._store = store
        self._call = call
        self._leading = leading

    def interval(self) -> float:
        return VACUUM_CHECK_SECONDS

    async def run_once(self) -> bool:
        """Whether the table was vacuumed."""
        if not self._leading() or not self._store.backend.leaves_dead_rows:
            return False
        vacuumed = await self._call(self._store.job_vacuum_if_needed)
        if vacuumed is None:
            return False
        event(log, "maintenance.vacuumed", table="due_jobs", **vacuumed)
        return True
