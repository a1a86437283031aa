"""The pruner keeps up with a steady load: one run deletes every finished job
past its retention, batch after batch, not one batch per run."""

from __future__ import annotations

import asyncio
from typing import Any

import due
from due.clock import FakeClock
from due.core.records import ClaimRequest, Completion, Retention
from due.maintenance.pruner import Pruner
from due.maintenance.vacuum import Vacuum
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


def test_the_vacuum_never_runs_during_a_round_of_the_pruner(app: due.App, clock: FakeClock) -> None:
    """Rows the pruner deletes while a vacuum runs would count as rows the vacuum
    could not clear (and make it wait a minute or more): the two share a lock,
    the pruner holding it for its whole round, the vacuum for its check."""

    @app.task(name="work")
    def work() -> None: ...

    finish_jobs(app, work, 25)
    clock.advance(2 * 86400)
    table_work = asyncio.Lock()
    threads = StoreCalls(1, "maintenance")
    held_during: list[bool] = []

    async def watched(fn: Any, *args: Any) -> Any:  # the real calls, and the lock's state
        held_during.append(table_work.locked())
        return await threads(fn, *args)

    pruner = Pruner(
        store=app.store,
        call=watched,
        leading=lambda: True,
        retention=Retention(succeeded=86400),
        batch=10,
        table_work=table_work,
    )
    vacuum = Vacuum(
        store=app.store, call=watched, leading=lambda: True, clock=clock, table_work=table_work
    )

    async def scenario() -> None:
        assert (await pruner.run_once())[0] == 24  # all but the newest (the id high-water mark)
        assert held_during and all(held_during)  # every prune call under the lock
        held_during.clear()
        async with table_work:  # as a round of the pruner would
            checking = asyncio.create_task(vacuum.run_once())
            for _ in range(20):
                await asyncio.sleep(0)
            assert held_during == [] and not checking.done()  # it waits
        await asyncio.wait_for(checking, 10)
        assert held_during == [True]  # then checks, under the lock

    asyncio.run(scenario())
