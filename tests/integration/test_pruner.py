"""The pruner keeps up with a steady load: one run deletes every finished job
past its retention, batch after batch, not one batch per run."""

from __future__ import annotations

import asyncio

import due
from due.clock import FakeClock
from due.core.records import ClaimRequest, Completion, Retention
from due.maintenance.pruner import Pruner
from due.worker.calls import StoreCalls


def finish_jobs(app: due.App, task: due.Task, count: int) -> None:
    app.enqueue_many([task.request() for _ in range(count)])
    claimed = app.store.job_claim(ClaimRequest("default", count, "w", 30))
    app.store.job_complete(
        [Completion(job.id, job.lease_token, due.JobState.SUCCEEDED, "null") for job in claimed]
    )


def test_one_run_prunes_every_batch_past_the_retention(app: due.App, clock: FakeClock) -> None:
    @app.task(name="work")
    def work() -> None: ...

    finish_jobs(app, work, 25)
    clock.advance(2 * 86400)
    finish_jobs(app, work, 3)  # younger than the retention: kept
    pruner = Pruner(
        store=app.store,
        call=StoreCalls(1, "pruner"),
        leading=lambda: True,
        retention=Retention(succeeded=86400),
        batch=10,
    )
    assert asyncio.run(pruner.run_once()) == (25, 0)
    assert len(app.jobs(limit=100)) == 3
