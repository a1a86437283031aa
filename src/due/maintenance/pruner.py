"""The pruner: finished jobs and schedule history older than the retention go.

Only the scheduler's leader prunes, every few minutes, in bounded batches, so
the tables (and the claim index, which never holds finished rows anyway) stay
small. Jobs still queued, running or waiting are never pruned, nor is the
newest job (its id is the high-water mark that keeps SQLite ids unique).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from due.core.records import Retention
from due.logs import event
from due.service import Calls
from due.store import Store

log = logging.getLogger("due.maintenance")
PRUNE_INTERVAL_SECONDS = 300.0
BATCH = 10_000


class Pruner:
    def __init__(
        self, *, store: Store, call: Calls, leading: Callable[[], bool], retention: Retention
    ) -> None:
        self._store = store
        self._call = call
        self._leading = leading
        self._retention = retention

    def interval(self) -> float:
        return PRUNE_INTERVAL_SECONDS

    async def run_once(self) -> tuple[int, int]:
        if not self._leading():
            return 0, 0
        await self._call(self._store.stats_fold)
        jobs, runs = await self._call(self._store.job_prune, self._retention, BATCH)
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
