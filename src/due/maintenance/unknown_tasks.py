"""Jobs of tasks this worker does not know: left alone, failed only after a grace.

During a rolling deploy a newer version may enqueue a task that older
workers lack. Claims only take the tasks a worker knows, so such a job waits,
attempts untouched, for a worker that knows it. Only when it has stayed due
past the grace (default 1 hour) and no live worker of its queue knows its task
(each worker registers the tasks it knows) is it failed, with the reason
"unknown task", kept, and retryable after the deploy. A job that one live
worker knows is that worker's to run, however busy it is.

Jobs that count against a limit are looked at too, in their own index: for an
unknown task as above, and for a limit their task no longer names in this
worker's code (taken out since they were enqueued). A job counts against its
task's limits as the worker that runs it knows them: such a job loses that
limit and runs without it (a job never waits for a limit that no running code
declares), at once when it was enqueued before this worker started, after the
grace otherwise (older code may enqueue it during a deploy, whose workers
still enforce it). The reason is in its history.

Each sweep reads a bounded number of each queue's due jobs (its claim index)
and the next one reads on from where it stopped, so a backlog of millions costs every
worker tens of milliseconds of the database a minute, not a full read of it.
"""

from __future__ import annotations

import dataclasses
import logging

from due.core.records import UnknownTaskSweep
from due.logs import event
from due.service import Calls
from due.store import Store

log = logging.getLogger("due.worker")
MIN_SWEEP_SECONDS = 0.5
"""The sweep's floor, for a short grace (tests): a tenth of the grace, never less."""
MAX_SWEEP_SECONDS = 60.0


class UnknownTaskReaper:
    def __init__(self, *, store: Store, call: Calls, sweep: UnknownTaskSweep) -> None:
        """`sweep`: this worker's queues and the tasks it knows, the grace, and how
        recently a worker must have been seen to count as live."""
        self._store = store
        self._call = call
        self._sweep = sweep

    def interval(self) -> float:
        return min(MAX_SWEEP_SECONDS, max(self._sweep.grace_seconds / 10, MIN_SWEEP_SECONDS))

    async def run_once(self) -> list[int]:
        result = await self._call(self._store.job_fail_unknown_tasks, self._sweep)
        self._sweep = dataclasses.replace(
            self._sweep, after=result.after, after_limited=result.after_limited
        )
        for job_id in result.failed:
            event(
                log, "job.unknown_task", logging.ERROR, job=job_id, grace=self._sweep.grace_seconds
            )
        for job_id in result.limits_dropped:
            event(
                log,
                "job.limits_dropped",
                logging.WARNING,
                job=job_id,
                grace=self._sweep.grace_seconds,
                reason="its task counts against that limit no more in this worker's code",
            )
        return result.failed
