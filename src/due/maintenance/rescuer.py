"""The rescuer: jobs whose worker died are put back in the queue within seconds.

A running job whose lease expired (its worker was killed, froze, or lost the
database) goes back to `queued`, due at once, with the reason in its history;
or it fails when it has no attempts left or keeps killing its workers. The
rescue never looks at the task, so any process rescues any job. It also marks
workers that stopped reporting in as gone. Cheap and idempotent: every worker
runs it on a short interval, and concurrent rescuers never take the same row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from due.core.records import RescueResult
from due.logs import event

if TYPE_CHECKING:
    from due.worker.worker import Worker

log = logging.getLogger("due.maintenance")


@dataclass(frozen=True, slots=True)
class RescueRound:
    rescued: RescueResult
    gone_workers: tuple[str, ...] = ()


class Rescuer:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def interval(self) -> float:
        return self.worker.settings.rescue_interval

    async def run_once(self) -> RescueRound:
        store = self.worker.store
        settings = self.worker.settings
        result = await self.worker.call(store.job_rescue, 1000, settings.max_lost_leases)
        for job_id in result.requeued:
            event(log, "job.rescued", logging.WARNING, job=job_id, outcome="requeued")
        for job_id in result.failed:
            event(log, "job.rescued", logging.ERROR, job=job_id, outcome="failed")
        for job_id in result.cancelled:
            event(log, "job.rescued", logging.WARNING, job=job_id, outcome="cancelled")
        if result.requeued:
            self.worker.wake_all()
        gone = await self.worker.call(store.worker_mark_gone, settings.gone_after)
        for worker_id in gone:
            event(log, "worker.gone", logging.WARNING, worker=worker_id)
        return RescueRound(result, tuple(gone))
