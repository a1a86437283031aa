"""Run one attempt of a claimed job and turn its end into a value. No SQL here.

Outcomes are values: a return becomes a SUCCEEDED completion, an exception a
QUEUED completion (retry after the backoff) or a FAILED one (no attempts left,
or an exception the task discards). The completer persists them in batches.

Async handlers run on the event loop; sync handlers in a thread pool. A sync
handler cannot be interrupted inside its thread, so on timeout the attempt is
ended as failed and the still-running thread is returned as a straggler: the
caller keeps counting it against its concurrency until it returns, and its
late result is discarded (the completion is already written).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import random
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from due.clock import Clock
from due.context import Context
from due.errors import PayloadError
from due.job import AttemptError, JobState
from due.logs import event
from due.payload import encode_value
from due.store.records import ClaimedJob, Completion
from due.task import Registry, Task

MAX_TRACEBACK_CHARACTERS = 20_000
NULL_RESULT = "null"
log = logging.getLogger("due.executor")


@dataclass(frozen=True, slots=True)
class Attempt:
    completion: Completion
    seconds: float
    straggler: asyncio.Future[Any] | None = None
    """A sync handler's thread still running after its timeout."""


class Executor:
    def __init__(
        self,
        tasks: Registry,
        clock: Clock,
        *,
        threads: concurrent.futures.ThreadPoolExecutor | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._tasks = tasks
        self._clock = clock
        self._threads = threads
        self._rng = rng or random.Random()
        self._busy_lock = threading.Lock()
        self.threads_busy = 0
        """Handler threads executing right now (stragglers past their timeout included)."""

    async def run(self, job: ClaimedJob) -> Attempt:
        task = self._tasks.get(job.task)
        args, kwargs = job.args, job.kwargs
        if task.context_parameter:
            args, kwargs = task.call_arguments(args, kwargs, self._context(task, job))
        started = time.perf_counter()
        call = _run_async if task.is_async else self._run_sync
        outcome = await call(task, args, kwargs)
        if isinstance(outcome, _TimedOut):
            completion = self._timed_out(task, job)
        elif isinstance(outcome, _Raised):
            completion = self._failed(task, job, outcome.error)
        else:
            completion = self._succeeded(task, job, outcome.value)
        straggler = outcome.straggler if isinstance(outcome, _TimedOut) else None
        return Attempt(completion, time.perf_counter() - started, straggler)

    async def _run_sync(
        self, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Outcome:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self._threads, functools.partial(self._in_thread, task.fn, args, kwargs)
        )
        # The thread cannot be stopped: on timeout we stop waiting and hand it back.
        done, _ = await asyncio.wait({future}, timeout=task.options.timeout)
        if not done:
            return _TimedOut(future)
        error = future.exception()
        if error is None:
            return _Returned(future.result())
        if isinstance(error, Exception):
            return _Raised(error)
        raise error

    def _in_thread(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with self._busy_lock:
            self.threads_busy += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with self._busy_lock:
                self.threads_busy -= 1

    def _context(self, task: Task[Any, Any], job: ClaimedJob) -> Context:
        return Context(
            job_id=job.id,
            task=job.task,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            lease_token=job.lease_token,
            scheduled_for=job.scheduled_for,
        )

    def _succeeded(self, task: Task[Any, Any], job: ClaimedJob, result: Any) -> Completion:
        if result is None:
            return Completion(job.id, job.lease_token, JobState.SUCCEEDED, result=NULL_RESULT)
        try:
            stored = encode_value(result, f"result of task {task.name!r}")
        except PayloadError as error:
            # The work is done; a result we cannot store must not make it run again.
            event(log, "job.result_unstorable", logging.WARNING, job=job.id, error=str(error))
            stored = encode_value({"unstorable_result": repr(result)[:1000]}, "result")
        return Completion(job.id, job.lease_token, JobState.SUCCEEDED, result=stored)

    def _failed(self, task: Task[Any, Any], job: ClaimedJob, error: Exception) -> Completion:
        record = AttemptError(
            attempt=job.attempt,
            error=f"{type(error).__name__}: {error}",
            traceback="".join(traceback.format_exception(error))[-MAX_TRACEBACK_CHARACTERS:],
            at=self._clock.now() or self._clock.wall(),
        )
        return self._after_failure(task, job, record, error)

    def _timed_out(self, task: Task[Any, Any], job: ClaimedJob) -> Completion:
        record = AttemptError(
            attempt=job.attempt,
            error=f"timed out after {task.options.timeout:g}s",
            traceback=None,
            at=self._clock.now() or self._clock.wall(),
            kind="timeout",
        )
        return self._after_failure(task, job, record, TimeoutError())

    def _after_failure(
        self, task: Task[Any, Any], job: ClaimedJob, record: AttemptError, error: Exception
    ) -> Completion:
        policy = task.options.retry
        if policy.should_retry(error, job.attempt, job.max_attempts):
            delay = policy.delay(job.attempt, self._rng)
            return Completion(
                job.id, job.lease_token, JobState.QUEUED, error=record, retry_in=delay
            )
        return Completion(job.id, job.lease_token, JobState.FAILED, error=record)


@dataclass(frozen=True, slots=True)
class _Returned:
    value: Any


@dataclass(frozen=True, slots=True)
class _Raised:
    error: Exception


@dataclass(frozen=True, slots=True)
class _TimedOut:
    straggler: asyncio.Future[Any] | None = None


_Outcome = _Returned | _Raised | _TimedOut


async def _run_async(
    task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _Outcome:
    if task.options.timeout is None:  # the common case, without a timer per job
        try:
            return _Returned(await task.fn(*args, **kwargs))
        except Exception as error:
            return _Raised(error)
    try:
        async with asyncio.timeout(task.options.timeout) as deadline:
            return _Returned(await task.fn(*args, **kwargs))
    except TimeoutError as error:
        # Our deadline, or a TimeoutError the handler itself raised?
        return _TimedOut() if deadline.expired() else _Raised(error)
    except Exception as error:
        return _Raised(error)
