"""The pruner: finished jobs and schedule history older than the retention go.

Only the scheduler's leader prunes, every few minutes, in bounded batches, so
the tables (and the claim index, which never holds finished rows anyway) stay
small. Jobs still queued, running or waiting are never pruned, nor is the
newest job (its id is the high-water mark that keeps SQLite ids unique).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from due.logs import event

if TYPE_CHECKING:
    from due.worker.worker import Worker

log = logging.getLogger("due.maintenance")
PRUNE_INTERVAL_SECONDS = 300.0
BATCH = 10_000


class Pruner:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def interval(self) -> float:
        return PRUNE_INTERVAL_SECONDS

    async def run_once(self) -> tuple[int, int]:
        scheduler = self.worker.scheduler
        if scheduler is None or not scheduler.leadership.is_leader:
            return 0, 0
        retention = self.worker.settings.retention
        jobs, runs = await self.worker.call(self.worker.store.job_prune, retention, BATCH)
        if jobs or runs:
            event(log, "maintenance.pruned", jobs=jobs, schedule_runs=runs, retention=retention)
        return jobs, runs
