"""app.wait() and app.await_job(): woken by the job's end, on both stores."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator

import pytest

import due
from due import waiter
from due.clock import FakeClock
from due.testing import drain
from tests.helpers.waiting import wait_until


@pytest.fixture
def other(
    backend_url: str, clock: FakeClock, app: due.App, tasks: dict[str, due.Task]
) -> Iterator[due.App]:
    """A second App on the same database (another process, as far as the store
    can tell), with the same tasks: it runs the jobs the first one waits for."""
    second = due.App(backend_url, clock=clock)
    for task in app.tasks:
        second.tasks.add(due.Task(second, task.fn, task.name, task.config))
    yield second
    second.close()


@pytest.fixture
def tasks(app: due.App) -> dict[str, due.Task]:
    @app.task(name="double")
    def double(n: int) -> int:
        return 2 * n

    @app.task(name="fails", retry=due.Retry(max_attempts=1))
    def fails() -> None:
        raise RuntimeError("no")

    return {"double": double, "fails": fails}


@pytest.fixture
def only_notifications(monkeypatch: pytest.MonkeyPatch) -> None:
    """No periodic re-check within a test's time: only the end's own wake-up
    (notification or commit) can answer a waiter."""
    monkeypatch.setattr(waiter, "RECHECK_SECONDS", 3600.0)


def registered(app: due.App, job_id: int) -> bool:
    return job_id in app._waiter._waiters


@pytest.mark.usefixtures("only_notifications")
def test_wait_returns_when_another_process_ends_the_job(
    app: due.App, other: due.App, tasks: dict[str, due.Task]
) -> None:
    job = tasks["double"].enqueue(21)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(app.wait, job.id, timeout=30)
        wait_until(lambda: registered(app, job.id), what="the waiter to register")
        assert not waiting.done()
        drain(other)
        ended = waiting.result(timeout=30)
    assert ended.id == job.id and ended.state == due.JobState.SUCCEEDED and ended.result == 42


@pytest.mark.usefixtures("only_notifications")
def test_many_waiters_of_one_watcher_each_get_their_own_job(
    app: due.App, other: due.App, tasks: dict[str, due.Task]
) -> None:
    jobs = [tasks["double"].enqueue(n) for n in range(5)] + [tasks["fails"].enqueue()]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        waiting = [pool.submit(app.wait, job.id, timeout=30) for job in jobs]
        wait_until(lambda: all(registered(app, job.id) for job in jobs), what="waiters")
        drain(other)
        ended = [future.result(timeout=30) for future in waiting]
    assert [job.id for job in ended] == [job.id for job in jobs]
    assert [job.result for job in ended[:5]] == [0, 2, 4, 6, 8]
    assert ended[5].state == due.JobState.FAILED and "RuntimeError: no" in (
        ended[5].last_error or ""
    )


def test_await_job_leaves_the_event_loop_free(
    app: due.App, other: due.App, tasks: dict[str, due.Task]
) -> None:
    job = tasks["double"].enqueue(5)

    async def scenario() -> due.Job:
        waiting = asyncio.create_task(app.await_job(job.id, timeout=30))
        while not registered(app, job.id):
            await asyncio.sleep(0.01)  # the loop keeps running while the job waits
        await asyncio.to_thread(drain, other)
        return await waiting

    assert asyncio.run(scenario()).result == 10


def test_a_job_that_has_ended_is_returned_at_once(app: due.App, tasks: dict[str, due.Task]) -> None:
    job = tasks["double"].enqueue(1)
    drain(app)
    assert app.wait(job.id, timeout=0).result == 2
    assert asyncio.run(app.await_job(job.id, timeout="1s")).result == 2


def test_a_wait_that_times_out_names_the_state(app: due.App, tasks: dict[str, due.Task]) -> None:
    job = tasks["double"].options(delay="1h").enqueue(1)
    timed_out = rf"job {job.id} \(double\) has not ended .*it is queued"
    with pytest.raises(TimeoutError, match=timed_out):
        app.wait(job.id, timeout=0.05)
    with pytest.raises(TimeoutError, match="it is queued"):
        asyncio.run(app.await_job(job.id, timeout=0.05))
    assert not registered(app, job.id)  # a waiter that gave up is forgotten


def test_waiting_for_a_job_that_does_not_exist(app: due.App) -> None:
    with pytest.raises(due.JobNotFoundError):
        app.wait(424242, timeout=1)
    with pytest.raises(due.ConfigurationError, match="wait timeout cannot be negative"):
        app.wait(1, timeout=-1)


def test_close_stops_the_watcher(app: due.App, tasks: dict[str, due.Task]) -> None:
    job = tasks["double"].options(delay="1h").enqueue(1)
    with pytest.raises(TimeoutError):
        app.wait(job.id, timeout=0.05)
    watcher = app._waiter._thread
    assert watcher is not None and watcher.is_alive()
    app.close()
    assert not watcher.is_alive()


@pytest.mark.usefixtures("only_notifications")
def test_a_cancel_elsewhere_wakes_the_waiter(
    app: due.App, other: due.App, tasks: dict[str, due.Task]
) -> None:
    job = tasks["double"].options(delay="1h").enqueue(1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(app.wait, job.id, timeout=30)
        wait_until(lambda: registered(app, job.id), what="the waiter to register")
        other.cancel(job.id)
        assert waiting.result(timeout=30).state == due.JobState.CANCELLED
