"""Jobs of tasks this worker does not know: left alone, failed only after a grace.

During a rolling deploy a newer version may enqueue a task that older
workers lack. Claims only take the tasks a worker knows, so such a job waits,
attempts untouched, for a worker that knows it. Only when it has stayed due
past the grace (default 1 hour) and no live worker of its queue knows its task
(each worker registers the tasks it knows) is it failed, with the reason
"unknown task", kept, and retryable after the deploy. A job that one live
worker knows is that worker's to run, however busy it is.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from due.core.records import UnknownTaskSweep
from due.logs import event

if TYPE_CHECKING:
    from due.worker.worker import Worker

log = logging.getLogger("due.worker")


class UnknownTaskReaper:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def interval(self) -> float:
        return min(60.0, max(self.worker.settings.unknown_task_grace / 10, 0.5))

    async def run_once(self) -> list[int]:
        settings = self.worker.settings
        sweep = UnknownTaskSweep(
            list(settings.queues),
            self.worker.task_names,
            settings.unknown_task_grace,
            settings.gone_after,
        )
        failed = await self.worker.call(self.worker.store.job_fail_unknown_tasks, sweep)
        for job_id in failed:
            event(
                log,
                "job.unknown_task",
                logging.ERROR,
                job=job_id,
                grace=settings.unknown_task_grace,
            )
        return list(failed)
