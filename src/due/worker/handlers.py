"""Call a task's handler and turn how it ended into a value (outcomes.py).

Async handlers run on the event loop, under their timeout. Sync handlers run
in a thread pool, where a timeout cannot interrupt them: on timeout the
handler's thread is handed back, still running, as the outcome's straggler
(the executor and the runner decide what that attempt writes, and when).
Neither starts once its lease is no longer trusted.

Whatever a handler raises ends its attempt, `BaseException`s included: a task
calling `sys.exit()` (or a command-line parser fed bad input), raising
`KeyboardInterrupt` itself, or meeting a `CancelledError` this worker did not
ask for fails that attempt alone (invariant 17). Only the worker's own stops
pass through: `JobCancelled` and `LeaseLost` at a safe point (as `Stopped`),
and the cancellation of the attempt's asyncio task. A real Ctrl-C never
arrives as a handler's `KeyboardInterrupt`: the worker takes SIGINT on its
loop (worker/main.py), and a thread is never sent one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Callable
from typing import Any

from due import instrumentation
from due.errors import JobCancelled, LeaseLost
from due.instrumentation import AttemptObserver
from due.task import Task
from due.worker.outcomes import Outcome, Raised, Returned, Stopped, TimedOut

NOT_TRUSTED = "not started: its lease is no longer trusted"


def _require_trust(trusted: Callable[[], bool] | None) -> None:
    if trusted is not None and not trusted():
        raise LeaseLost(NOT_TRUSTED)


async def run_async(
    task: Task[Any, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    trusted: Callable[[], bool] | None,
) -> Outcome:
    if trusted is not None and not trusted():
        return Stopped(LeaseLost(NOT_TRUSTED))
    if task.config.timeout is None:  # the common case, without a timer per job
        try:
            return Returned(await task.fn(*args, **kwargs))
        except Exception as error:
            return Raised(error)
        except BaseException as error:
            return _ended_by(error)
    try:
        async with asyncio.timeout(task.config.timeout) as deadline:
            return Returned(await task.fn(*args, **kwargs))
    except TimeoutError as error:
        # Our deadline, or a TimeoutError the handler itself raised?
        return TimedOut() if deadline.expired() else Raised(error)
    except Exception as error:
        return Raised(error)
    except BaseException as error:
        return _ended_by(error)


def _ended_by(error: BaseException) -> Outcome:
    """The outcome of an async handler that raised a `BaseException` outside
    `Exception`; re-raised only when it is this attempt's task being cancelled
    (a cancel request, a lost lease, a shutdown: the runner writes that end)."""
    if isinstance(error, JobCancelled | LeaseLost):
        return Stopped(error)
    current = asyncio.current_task()
    if current is not None and current.cancelling():
        # Cancelled by the worker: its stop wins over whatever the handler
        # then raised (a handler that turned the cancel into sys.exit, say).
        if isinstance(error, asyncio.CancelledError):
            raise error
        raise asyncio.CancelledError() from error
    return Raised(error)


class HandlerThreads:
    """The thread pool sync handlers run in, and how many of its threads run one."""

    def __init__(self, threads: concurrent.futures.ThreadPoolExecutor | None) -> None:
        self._threads = threads
        self._busy_lock = threading.Lock()
        self.threads_busy = 0
        """Handler threads executing right now (stragglers past their timeout included)."""

    async def run(
        self,
        task: Task[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        trusted: Callable[[], bool] | None,
        observers: list[AttemptObserver] | None = None,
    ) -> Outcome:
        loop = asyncio.get_running_loop()
        call = functools.partial(self._in_thread, task.fn, args, kwargs, trusted, observers)
        future = loop.run_in_executor(self._threads, call)
        # The thread cannot be stopped: on timeout we stop waiting and hand it back.
        done, _ = await asyncio.wait({future}, timeout=task.config.timeout)
        if not done:
            return TimedOut(future)
        error = future.exception()
        if error is None:
            return Returned(future.result())
        if isinstance(error, JobCancelled | LeaseLost):
            return Stopped(error)
        # SystemExit and KeyboardInterrupt included: in a thread they are the
        # task's own (a signal is delivered to the main thread only).
        return Raised(error)

    def _in_thread(
        self,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        trusted: Callable[[], bool] | None,
        observers: list[AttemptObserver] | None = None,
    ) -> Any:
        with self._busy_lock:
            self.threads_busy += 1
        try:
            _require_trust(trusted)
            if observers:
                with instrumentation.running(observers):
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)
        finally:
            with self._busy_lock:
                self.threads_busy -= 1
