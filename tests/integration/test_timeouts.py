"""A timed-out sync handler never overlaps its own retry (faults issue, hole 10).

A thread cannot be stopped: the retry used to be written at the timeout, so
another worker could start it while the old attempt's thread still ran. Now
the job keeps its slot and its lease until the thread returns; the thread is
told to stop at its next safe point and may write nothing more.
"""

from __future__ import annotations

import asyncio
import threading
import time

import due
from due import JobState
from due.core.records import ClaimRequest
from due.worker.settings import WorkerSettings
from due.worker.worker import Worker
from tests.helpers.waiting import async_wait_until

TIMEOUT = 0.2


def test_the_retry_waits_for_the_timed_out_thread(app: due.App) -> None:
    returned = threading.Event()
    stopped_at_safe_point = threading.Event()
    ran_for: list[float] = []

    @app.task(name="slow", timeout=TIMEOUT, retry=due.Retry(max_attempts=3, backoff=0))
    def slow(ctx: due.Context, safe_points: bool) -> None:
        began = time.monotonic()
        try:
            deadline = began + 1.0
            while time.monotonic() < deadline:
                time.sleep(0.05)
                if safe_points:
                    ctx.progress(1)
        except due.LeaseLost:
            stopped_at_safe_point.set()
            raise
        finally:
            ran_for.append(time.monotonic() - began)
            returned.set()

    async def scenario(safe_points: bool) -> None:
        returned.clear()
        job = slow.enqueue(safe_points)
        worker = Worker(app, WorkerSettings.build({"default": 2}, lease="10s"))
        assert await worker.producers["default"].run_once() == 1
        producer = worker.producers["default"]
        # Past the timeout, the thread still runs (or, with safe points, has stopped).
        await async_wait_until(
            lambda: producer.jobs.outcomes or producer.jobs.held[job.id].straggler,
            what="the timeout",
        )
        if not safe_points:
            assert not returned.is_set()
            await worker.completer.run_once()
            held = app.get(job.id)
            assert held.state == JobState.RUNNING  # no retry while the thread lives
            assert app.store.job_claim(ClaimRequest("default", 1, "another", 10.0)) == []
            assert (await worker.heartbeater.run_once()).renewed == 1  # the lease is kept
            assert worker.producers["default"].free_slots == 1  # and the slot
        await async_wait_until(lambda: producer.jobs.outcomes, what="the thread's end")
        await worker.completer.run_once()
        retried = app.get(job.id)
        assert retried.state == JobState.QUEUED and retried.attempt == 1
        assert retried.last_error == f"timed out after {TIMEOUT:g}s"
        assert worker.producers["default"].free_slots == 2
        app.cancel(job.id)  # (its retry is not this test's business)

    asyncio.run(asyncio.wait_for(scenario(safe_points=False), timeout=30))
    asyncio.run(asyncio.wait_for(scenario(safe_points=True), timeout=30))
    assert stopped_at_safe_point.is_set()
    # The handler's own time (not the scenario's, whose worker and store calls
    # a loaded machine slows): it stopped at a safe point, not after its 1 s.
    assert ran_for[-1] < 0.9, ran_for
