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
from collections.abc import Callable
from dataclasses import dataclass

from due.core.records import RescueResult
from due.logs import event
from due.service import Calls
from due.store import Store

log = logging.getLogger("due.maintenance")
BATCH = 1000
MIN_RESCUE_SECONDS = 0.1
"""The rescuer's floor: every worker looks, a statement each time; leases last
seconds, so looking more often rescues nothing sooner that matters."""


@dataclass(frozen=True, slots=True)
class RescueRound:
    rescued: RescueResult
    gone_workers: tuple[str, ...] = ()


class Rescuer:
    def __init__(
        self,
        *,
        store: Store,
        call: Calls,
        interval: float,
        max_lost_leases: int,
        gone_after: float,
        on_requeued: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self._call = call
        self._interval = interval
        self._max_lost_leases = max_lost_leases
        self._gone_after = gone_after
        self._on_requeued = on_requeued

    def interval(self) -> float:
        return max(self._interval, MIN_RESCUE_SECONDS)

    async def run_once(self) -> RescueRound:
        result = await self._call(self._store.job_rescue, BATCH, self._max_lost_leases)
        for job_id in result.requeued:
            event(log, "job.rescued", logging.WARNING, job=job_id, outcome="requeued")
        for job_id in result.failed:
            event(log, "job.rescued", logging.ERROR, job=job_id, outcome="failed")
        for job_id in result.cancelled:
            event(log, "job.rescued", logging.WARNING, job=job_id, outcome="cancelled")
        if result.requeued:
            self._on_requeued()
        gone = await self._call(self._store.worker_mark_gone, self._gone_after)
        for worker_id in gone:
            event(log, "worker.gone", logging.WARNING, worker=worker_id)
        return RescueRound(result, tuple(gone))
