"""Call a task's handler and turn how it ended into a value (outcomes.py).

Async handlers run on the event loop, under their timeout. Sync handlers run
in a thread pool, where a timeout cannot interrupt them: on timeout the
handler's thread is handed back, still running, as the outcome's straggler
(the executor and the runner decide what that attempt writes, and when).
Neither starts once its lease is no longer trusted.
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
        except (JobCancelled, LeaseLost) as signal:
            return Stopped(signal)
    try:
        async with asyncio.timeout(task.config.timeout) as deadline:
            return Returned(await task.fn(*args, **kwargs))
    except TimeoutError as error:
        # Our deadline, or a TimeoutError the handler itself raised?
        return TimedOut() if deadline.expired() else Raised(error)
    except Exception as error:
        return Raised(error)
    except (JobCancelled, LeaseLost) as signal:
        return Stopped(signal)


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
        if isinstance(error, Exception):
            return Raised(error)
        if isinstance(error, JobCancelled | LeaseLost):
            return Stopped(error)
        raise error

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
