"""Whatever a handler raises ends its attempt, never its worker (invariant 17):
`SystemExit`, `KeyboardInterrupt` and a `CancelledError` nobody asked for are
failures like any exception, on real stores; the worker's own stops are not.
(tests/process/test_task_exits.py runs the same in a real `due worker`.)"""

from __future__ import annotations

import asyncio
import sys

import pytest

import due
from due import JobState
from due.testing import drain
from tests.helpers.waiting import async_wait_until
from tests.integration.test_worker import make_worker, run, settle


def exit_in_thread() -> None:
    sys.exit("leaving with code 3")


async def exit_on_the_loop() -> None:
    await asyncio.sleep(0)
    sys.exit(3)


def interrupt_in_thread() -> None:
    raise KeyboardInterrupt("the task's own")


async def interrupt_on_the_loop() -> None:
    raise KeyboardInterrupt("the task's own")


async def await_a_cancelled_future() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


class Unusual(BaseException):
    """A BaseException of a library's own."""


def raise_a_base_exception() -> None:
    raise Unusual("neither Exception nor an exit")


HANDLERS = {
    "exit_in_thread": (exit_in_thread, "builtins.SystemExit", "SystemExit: leaving with code 3"),
    "exit_on_the_loop": (exit_on_the_loop, "builtins.SystemExit", "SystemExit: 3"),
    "interrupt_in_thread": (
        interrupt_in_thread,
        "builtins.KeyboardInterrupt",
        "KeyboardInterrupt: the task's own",
    ),
    "interrupt_on_the_loop": (
        interrupt_on_the_loop,
        "builtins.KeyboardInterrupt",
        "KeyboardInterrupt: the task's own",
    ),
    "await_a_cancelled_future": (
        await_a_cancelled_future,
        "asyncio.exceptions.CancelledError",
        "CancelledError: ",
    ),
    "raise_a_base_exception": (
        raise_a_base_exception,
        f"{__name__}.Unusual",
        "Unusual: neither Exception nor an exit",
    ),
}


@pytest.mark.parametrize("name", HANDLERS)
def test_a_base_exception_fails_the_attempt_with_its_traceback(app: due.App, name: str) -> None:
    handler, exception, error = HANDLERS[name]
    task = app.task(name=name)(handler)
    job = task.enqueue()
    outcome = drain(app)
    assert outcome.failed == [job.id]  # the default Retry: any Exception, so not these
    failed = app.get(job.id)
    assert failed.state == JobState.FAILED and failed.attempt == 1
    assert failed.errors[-1].exception == exception
    assert failed.last_error == error
    assert handler.__name__ in (failed.errors[-1].traceback or "")


def test_a_retry_policy_that_names_system_exit_retries_it(app: due.App) -> None:
    @app.task(name="flaky_cli", retry=due.Retry(max_attempts=2, retry_on=(Exception, SystemExit)))
    def flaky_cli() -> None:
        sys.exit(2)

    job = flaky_cli.enqueue()
    assert drain(app).retried == [job.id]
    assert app.get(job.id).state == JobState.QUEUED


def test_a_check_that_exits_is_a_warning_on_a_success(app: due.App) -> None:
    def check(result: int) -> str | None:
        sys.exit("the check gave up")

    @app.task(name="checked", check=check)
    def checked() -> int:
        return 1

    job = checked.enqueue()
    assert drain(app).succeeded == [job.id]
    assert app.get(job.id).warning == "its check= raised SystemExit: the check gave up"


def test_the_workers_own_cancel_wins_over_an_exit_the_handler_makes_of_it(
    app: due.App,
) -> None:
    """A handler that turns the worker's cancellation into sys.exit() is still
    cancelled: the request is what the job ends in (invariant 11)."""
    exited = []

    @app.task(name="quitter")
    async def quitter() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            exited.append(True)
            sys.exit("interrupted: quitting")

    async def scenario() -> None:
        job = quitter.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        app.cancel(job.id)
        await worker.heartbeater.run_once()  # the reply carries the request
        await settle()
        assert exited == [True]
        await worker.completer.run_once()
        cancelled = app.get(job.id)
        assert cancelled.state == JobState.CANCELLED, cancelled.errors
        assert worker.running == {} and worker.producers["default"].free_slots == 10

    run(scenario)


def test_a_worker_runs_on_after_a_handler_exits(app: due.App) -> None:
    """In a real worker's loop: the exits fail, the job beside them succeeds."""
    release = asyncio.Event()

    @app.task(name="exits")
    def exits() -> None:
        sys.exit(1)

    @app.task(name="async_exits")
    async def async_exits() -> None:
        raise KeyboardInterrupt

    @app.task(name="beside")
    async def beside() -> str:
        await release.wait()
        return "done"

    async def scenario() -> None:
        kept = beside.enqueue()
        ended = [exits.enqueue(), async_exits.enqueue()]
        worker = make_worker(app)
        assert await worker.producers["default"].run_once() == 3
        await async_wait_until(lambda: len(worker.completer.pending) == 2, what="the exits")
        release.set()
        await async_wait_until(lambda: len(worker.completer.pending) == 3, what="the job beside")
        await worker.completer.run_once()
        assert [app.get(job.id).state for job in ended] == [JobState.FAILED] * 2
        assert app.get(kept.id).state == JobState.SUCCEEDED

    run(scenario)


def test_a_backoff_that_exits_fails_the_job_instead_of_leaving_it_running(app: due.App) -> None:
    def backoff(attempt: int) -> float:
        sys.exit("no backoff today")

    @app.task(name="unlucky", retry=due.Retry(max_attempts=3, backoff=backoff))
    def unlucky() -> None:
        raise ValueError("first failure")

    job = unlucky.enqueue()
    assert drain(app).failed == [job.id]
    failed = app.get(job.id)
    assert failed.errors[-1].exception == "builtins.SystemExit"
    assert failed.last_error == (
        "due could not record this attempt's outcome: SystemExit: no backoff today"
    )
