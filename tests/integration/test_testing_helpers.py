"""due.testing and the executor on real stores: what users' own tests rely on."""

from __future__ import annotations

import asyncio
import threading

import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.testing import adrain, drain


def test_drain_runs_sync_and_async_tasks_with_their_context(app: due.App) -> None:
    seen = []

    @app.task(name="sync_task")
    def sync_task(ctx: due.Context, n: int) -> int:
        seen.append(("sync", n, ctx.job_id, ctx.attempt, ctx.lease_token))
        return n * 2

    @app.task(name="async_task")
    async def async_task(ctx: due.Context, *, n: int) -> int:
        await asyncio.sleep(0)
        seen.append(("async", n, ctx.job_id, ctx.attempt, ctx.lease_token))
        return n * 3

    a, b = sync_task.enqueue(5), async_task.enqueue(n=7)
    result = drain(app)
    assert sorted(result.succeeded) == sorted([a.id, b.id]) and result.attempts == 2
    assert sorted(seen) == [("async", 7, b.id, 1, 1), ("sync", 5, a.id, 1, 1)]
    assert app.get(a.id).result == 10 and app.get(b.id).result == 21


def test_drain_leaves_jobs_that_are_not_due(app: due.App, clock: FakeClock) -> None:
    @app.task(name="later")
    def later() -> None: ...

    job = later.options(delay="1h").enqueue()
    assert drain(app).attempts == 0
    clock.advance("1h")
    assert drain(app).succeeded == [job.id]


def test_drain_leaves_tasks_it_does_not_know(
    app: due.App, backend_url: str, clock: FakeClock
) -> None:
    newer = due.App(backend_url, clock=clock)

    @newer.task(name="added_in_next_release")
    def added() -> None: ...

    try:
        job = added.enqueue()
    finally:
        newer.close()
    assert drain(app).attempts == 0
    assert app.get(job.id).state == JobState.QUEUED and app.get(job.id).attempt == 0


def test_async_timeout_ends_the_attempt(app: due.App) -> None:
    @app.task(name="slow", timeout=0.05, retry=due.Retry(max_attempts=1))
    async def slow() -> None:
        await asyncio.sleep(30)

    @app.task(name="own_timeout", retry=due.Retry(max_attempts=1))
    async def own_timeout() -> None:
        raise TimeoutError("upstream took too long")

    cut, own = slow.enqueue(), own_timeout.enqueue()
    assert sorted(drain(app).failed) == sorted([cut.id, own.id])
    assert app.get(cut.id).errors[0].kind == "timeout"
    assert app.get(cut.id).last_error == "timed out after 0.05s"
    assert app.get(own.id).errors[0].kind == "error"
    assert "upstream took too long" in (app.get(own.id).last_error or "")


def test_sync_timeout_stops_waiting_and_discards_the_late_result(app: due.App) -> None:
    release = threading.Event()
    finished = threading.Event()

    @app.task(name="stuck", timeout=0.05, retry=due.Retry(max_attempts=1))
    def stuck() -> str:
        release.wait(10)
        finished.set()
        return "late"

    job = stuck.enqueue()
    assert drain(app).failed == [job.id]
    release.set()
    assert finished.wait(10)
    failed = app.get(job.id)
    assert failed.state == JobState.FAILED and failed.result is None
    assert failed.errors[0].kind == "timeout"


def test_an_unstorable_result_does_not_rerun_the_work(app: due.App) -> None:
    @app.task(name="returns_object")
    def returns_object() -> object:
        return object()

    job = returns_object.enqueue()
    assert drain(app).succeeded == [job.id]
    assert "unstorable_result" in app.get(job.id).result


def test_adrain_inside_an_event_loop(app: due.App) -> None:
    @app.task(name="t")
    async def t() -> str:
        return "ok"

    job = t.enqueue()

    async def scenario() -> None:
        with pytest.raises(RuntimeError, match="await adrain"):
            drain(app)
        assert (await adrain(app)).succeeded == [job.id]

    asyncio.run(scenario())
