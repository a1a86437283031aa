"""The pruner: finished jobs and schedule history older than the retention go.

Only the scheduler's leader prunes, every minute, in batches of its own
transaction each (short locks), batch after batch until nothing older than the
retention is left (at most MAX_BATCHES per run, 200,000 jobs, so a huge first
backlog neither holds the leader's loop nor delays a shutdown by more than
seconds): a steady 1,000 jobs/s is 60,000 rows a minute, and
one batch per run would let the table grow without end. Jobs still queued,
running or waiting are never pruned, nor is the newest job (its id is the
high-water mark that keeps SQLite ids unique).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from due.core.records import Retention
from due.logs import event
from due.service import Calls
from due.store import Store

log = logging.getLogger("due.maintenance")
PRUNE_INTERVAL_SECONDS = 60.0
BATCH = 10_000
MAX_BATCHES = 20


class Pruner:
    def __init__(
        self,
        *,
        store: Store,
        call: Calls,
        leading: Callable[[], bool],
        retention: Retention,
        batch: int = BATCH,
        table_work: asyncio.Lock | None = None,
    ) -> None:
        self._store = store
        self._call = call
        self._leading = leading
        self._retention = retention
        self._batch = batch
        self.table_work = table_work or asyncio.Lock()
        """Held for a whole round, shared with the vacuum (maintenance/vacuum.py)."""

    def interval(self) -> float:
        return PRUNE_INTERVAL_SECONDS

    async def run_once(self) -> tuple[int, int]:
        if not self._leading():
            return 0, 0
        async with self.table_work:
            return await self._prune()

    async def _prune(self) -> tuple[int, int]:
        await self._call(self._store.stats_fold)
        jobs = runs = 0
        for _ in range(MAX_BATCHES):
            batch_jobs, batch_runs = await self._call(
                self._store.job_prune, self._retention, self._batch
            )
            jobs, runs = jobs + batch_jobs, runs + batch_runs
            if max(batch_jobs, batch_runs) < self._batch or not self._leading():
                break
        if jobs or runs:
            event(
                log,
                "maintenance.pruned",
                jobs=jobs,
                schedule_runs=runs,
                retention_succeeded=self._retention.succeeded,
                retention_failed=self._retention.failed,
            )
        return jobs, runs
