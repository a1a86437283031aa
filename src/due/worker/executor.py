"""Run one attempt of a claimed job and turn its end into a value. No SQL here.

Outcomes are values: a return becomes a SUCCEEDED completion, an exception a
QUEUED completion (retry after the backoff) or a FAILED one (no attempts left,
or an exception the task discards). The completer persists them in batches.

Async handlers run on the event loop; sync handlers in a thread pool
(handlers.py). A sync handler cannot be interrupted inside its thread, so on
timeout the attempt is ended as failed and the still-running thread is
returned as a straggler: it is told to stop at its next safe point (and may
write nothing more), and the caller keeps its slot and its lease until it
returns, writing the timeout only then, so the retry cannot start while the
old attempt still runs. Its late result is discarded.

With attempt hooks registered (due.instrumentation: tracing), their observers
are entered around the handler where it runs (its thread, or the loop) and
told how the attempt ended; the headers they keep ride on the attempt's error
entry. With none, an attempt costs one check of an empty list more.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from due import instrumentation
from due.clock import Clock
from due.core.jobs import AttemptError, JobState
from due.core.records import ClaimedJob, Completion
from due.errors import LeaseLost, PayloadError, class_path
from due.instrumentation import AttemptEnd, AttemptObserver
from due.logs import event
from due.long_work.context import Context
from due.payload import encode_value, storable_text
from due.shown_arguments import scrubbed, secret_texts
from due.task import Registry, Task
from due.worker.handlers import HandlerThreads, run_async
from due.worker.outcomes import (
    Attempt,
    Outcome,
    Raised,
    Stopped,
    TimedOut,
    raised_by,
)

if TYPE_CHECKING:
    from due.app import App

MAX_TRACEBACK_CHARACTERS = 20_000
NULL_RESULT = "null"
log = logging.getLogger("due.executor")
STOPPED_AT_AN_AWAIT = "stopped at an await: its lease was lost, or its worker stopped"


class Executor:
    def __init__(
        self,
        tasks: Registry,
        clock: Clock,
        *,
        threads: concurrent.futures.ThreadPoolExecutor | None = None,
        rng: random.Random | None = None,
        app: App | None = None,
        worker: str | None = None,
    ) -> None:
        self._tasks = tasks
        self._worker = worker
        self._clock = clock
        self._app = app
        self._handler_threads = HandlerThreads(threads)
        self._rng = rng or random.Random()

    @property
    def threads_busy(self) -> int:
        """Handler threads executing right now (stragglers past their timeout included)."""
        return self._handler_threads.threads_busy

    def context_for(self, job: ClaimedJob, task: Task[Any, Any]) -> Context | None:
        """The context a job's handler will get (None when it declares none)."""
        if task.context_parameter is None:
            return None
        return Context.for_job(job, self._app, worker=self._worker)

    async def run(
        self,
        job: ClaimedJob,
        context: Context | None = None,
        trusted: Callable[[], bool] | None = None,
        task: Task[Any, Any] | None = None,
        stopped: Callable[[], JobState | None] | None = None,
    ) -> Attempt:
        """Run one attempt (of `task`, looked up by the job's name if not given).
        `trusted` says whether its lease is still trusted: asked once more right
        before the handler starts (a paused process may wake up past its
        deadline), so a handler never starts on a lease already gone.
        `stopped` says what an attempt cancelled at an await ends in (the
        caller, who cancelled it, writes that): told to the attempt hooks."""
        task = task or self._tasks.get(job.task)
        args, kwargs = job.args, job.kwargs
        if task.context_parameter:
            context = context or Context.for_job(job, self._app, worker=self._worker)
            args, kwargs = task.call_arguments(args, kwargs, context)
        if instrumentation.attempt_hooks:  # empty unless tracing is on: one check
            observers = instrumentation.observers_for(instrumentation.attempt_info(job))
            if observers:
                return await self._observed(
                    job, task, context, args, kwargs, trusted, observers, stopped
                )
        started = time.perf_counter()
        if task.is_async:
            outcome = await run_async(task, args, kwargs, trusted)
        else:
            outcome = await self._handler_threads.run(task, args, kwargs, trusted)
        seconds = time.perf_counter() - started
        try:
            return self._attempt(task, job, context, outcome, seconds)
        except BaseException as error:  # (no await in it: never this task's cancellation)
            # Nothing may leave a job without an outcome: not even a step of ours,
            # nor a task's check= that calls sys.exit().
            return Attempt(self.crashed(job, error, context), seconds)

    async def _observed(
        self,
        job: ClaimedJob,
        task: Task[Any, Any],
        context: Context | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        trusted: Callable[[], bool] | None,
        observers: list[AttemptObserver],
        stopped: Callable[[], JobState | None] | None,
    ) -> Attempt:
        """`run` with the attempt hooks' observers (due.instrumentation) around
        the handler, where it runs, and told how it ended."""
        started = time.perf_counter()
        try:
            if task.is_async:
                with instrumentation.running(observers):
                    outcome = await run_async(task, args, kwargs, trusted)
            else:
                outcome = await self._handler_threads.run(task, args, kwargs, trusted, observers)
        except asyncio.CancelledError:
            # Cancelled at an await (a cancel request, a lost lease, a shutdown):
            # the caller writes its end; the hooks hear what that end is.
            ends_in = None if stopped is None else stopped()
            lost = None if ends_in is not None else LeaseLost(STOPPED_AT_AN_AWAIT)
            message = None if lost is None else STOPPED_AT_AN_AWAIT
            instrumentation.ended(observers, AttemptEnd(ends_in, lost, message))
            raise
        seconds = time.perf_counter() - started
        raised = raised_by(outcome, task)
        try:
            attempt = self._attempt(task, job, context, outcome, seconds)
        except BaseException as error:  # (as in `run`)
            attempt, raised = Attempt(self.crashed(job, error, context), seconds), error
        completion = attempt.completion
        if completion is not None:
            state: JobState | None = completion.state
        else:  # nothing to write: its lease was lost, or its own transaction wrote its success
            state = None if attempt.lease_lost else JobState.SUCCEEDED
        end = AttemptEnd(state, raised, *self._shown_error(task, job, raised))
        kept = instrumentation.ended(observers, end)
        if completion is not None and completion.error is not None:
            completion.headers = kept
        return attempt

    @staticmethod
    def _shown_error(
        task: Task[Any, Any], job: ClaimedJob, raised: BaseException | None
    ) -> tuple[str | None, str | None]:
        """An attempt's error for the attempt hooks: its message and traceback
        hidden as the history keeps them (a span must not show a redacted
        value the store hides)."""
        if raised is None:
            return None, None
        secrets = _secrets(task, job)
        return _message(raised, secrets), _traceback(raised, secrets)

    def _attempt(
        self,
        task: Task[Any, Any],
        job: ClaimedJob,
        context: Context | None,
        outcome: Outcome,
        seconds: float,
    ) -> Attempt:
        if isinstance(outcome, Stopped):
            return self._stopped(task, job, outcome.signal, context, seconds)
        if isinstance(outcome, TimedOut):
            completion = self._timed_out(task, job)
            if context is not None and outcome.straggler is not None:
                context.stop_writing("ran past its timeout")
        elif isinstance(outcome, Raised):
            completion = self._failed(task, job, outcome.error)
        elif context is not None and context.completed_in_transaction:
            return Attempt(None, seconds)  # its success is already written
        elif job.has_pieces or (context is not None and context.pieces_spawned):
            # Its pieces (this attempt's or an earlier one's) decide how it ends.
            completion = Completion(job.id, job.lease_token, JobState.WAITING)
        else:
            completion = self._succeeded(task, job, outcome.value)
        if context is not None:
            completion.progress = context.progress_json()
        completion.settles = self._settles(job, context)
        completion.seconds = seconds
        straggler = outcome.straggler if isinstance(outcome, TimedOut) else None
        return Attempt(completion, seconds, straggler)

    def crashed(
        self, job: ClaimedJob, error: BaseException, context: Context | None = None
    ) -> Completion:
        """The end of an attempt that due itself could not carry through (a bug, a
        value it could not handle): failed with the reason, retried per the policy."""
        task = self._tasks.get(job.task)
        secrets = _secrets(task, job)
        record = AttemptError(
            attempt=job.attempt,
            error=storable_text(
                f"due could not record this attempt's outcome: {scrubbed(_text(error), secrets)}"
            ),
            traceback=_traceback(error, secrets),
            at=self._clock.now() or self._clock.wall(),
            kind="error",
            exception=class_path(error),
            worker=self._worker,
        )
        try:
            completion = self._after_failure(task, job, record, error)
        except BaseException:  # the task's own backoff= failed too: not retried
            completion = Completion(job.id, job.lease_token, JobState.FAILED, error=record)
        completion.settles = self._settles(job, context)
        return completion

    def _stopped(
        self,
        task: Task[Any, Any],
        job: ClaimedJob,
        signal: BaseException,
        context: Context | None,
        seconds: float,
    ) -> Attempt:
        if isinstance(signal, LeaseLost):
            return Attempt(None, seconds, lease_lost=True)
        return Attempt(self.cancelled(job, context), seconds)

    def cancelled(self, job: ClaimedJob, context: Context | None) -> Completion:
        """The end of an attempt stopped by a cancellation request: not retried."""
        record = AttemptError(
            attempt=job.attempt,
            error="cancelled on request",
            traceback=None,
            at=self._clock.now() or self._clock.wall(),
            kind="cancelled",
            worker=self._worker,
        )
        completion = Completion(job.id, job.lease_token, JobState.CANCELLED, error=record)
        completion.progress = context.progress_json() if context else None
        completion.settles = self._settles(job, context)
        return completion

    @staticmethod
    def _settles(job: ClaimedJob, context: Context | None) -> bool:
        """Whether this job's end concerns a parent or pieces (written with them)."""
        spawned = context is not None and context.pieces_spawned > 0
        return job.settles_a_parent or job.has_pieces or spawned

    def _succeeded(self, task: Task[Any, Any], job: ClaimedJob, result: Any) -> Completion:
        if result is None:
            return Completion(job.id, job.lease_token, JobState.SUCCEEDED, result=NULL_RESULT)
        try:
            stored = encode_value(result, f"result of task {task.name!r}")
        except PayloadError as error:
            # The work is done; a result we cannot store must not make it run again.
            event(log, "job.result_unstorable", logging.WARNING, job=job.id, error=str(error))
            stored = encode_value(
                {"unstorable_result": storable_text(_repr(result), 1000)}, "result"
            )
        completion = Completion(job.id, job.lease_token, JobState.SUCCEEDED, result=stored)
        completion.warning = _checked(task, job, result)
        return completion

    def _failed(self, task: Task[Any, Any], job: ClaimedJob, error: BaseException) -> Completion:
        secrets = _secrets(task, job)
        record = AttemptError(
            attempt=job.attempt,
            error=storable_text(scrubbed(_text(error), secrets)),
            traceback=_traceback(error, secrets),
            at=self._clock.now() or self._clock.wall(),
            exception=class_path(error),
            worker=self._worker,
        )
        return self._after_failure(task, job, record, error)

    def _timed_out(self, task: Task[Any, Any], job: ClaimedJob) -> Completion:
        record = AttemptError(
            attempt=job.attempt,
            error=f"timed out after {task.config.timeout:g}s",
            traceback=None,
            at=self._clock.now() or self._clock.wall(),
            kind="timeout",
            worker=self._worker,
        )
        return self._after_failure(task, job, record, TimeoutError())

    def _after_failure(
        self, task: Task[Any, Any], job: ClaimedJob, record: AttemptError, error: BaseException
    ) -> Completion:
        policy = task.config.retry
        if policy.should_retry(error, job.attempt, job.max_attempts):
            delay = policy.delay(job.attempt, self._rng)
            return Completion(
                job.id, job.lease_token, JobState.QUEUED, error=record, retry_in=delay
            )
        return Completion(job.id, job.lease_token, JobState.FAILED, error=record)


def _secrets(task: Task[Any, Any], job: ClaimedJob) -> set[str]:
    """The values of the job's arguments that due shows hidden: an error's text
    (a handler's message that repeats an argument) is stored without them."""
    return secret_texts(job.args, job.kwargs, task.redact, task.redacted_positions)


MAX_WARNING_CHARACTERS = 2000


def _checked(task: Task[Any, Any], job: ClaimedJob, result: Any) -> str | None:
    """The problem the task's check= finds with a successful result, if any. A
    check that raises is a problem too (the work is done: it is not run again)."""
    check = task.config.check
    if check is None:
        return None
    try:
        problem = check(result)
    except BaseException as error:  # sys.exit() in a check too: the work is done
        problem = f"its check= raised {_text(error)}"
    if problem is None:
        return None
    return storable_text(str(problem), MAX_WARNING_CHARACTERS)


def _repr(value: Any) -> str:
    """`repr(value)`, even when its repr fails or recurses too deep."""
    try:
        return repr(value)
    except Exception:  # RecursionError included
        return f"<{type(value).__name__} whose repr() failed>"


def _message(error: BaseException, secrets: set[str]) -> str:
    """`error`'s message without `secrets`, as the history keeps it after its type."""
    text = _text(error)
    return storable_text(scrubbed(text, secrets)).removeprefix(f"{type(error).__name__}: ")


def _traceback(error: BaseException, secrets: set[str]) -> str:
    """`error`'s traceback without `secrets`, as the history keeps it."""
    text = "".join(traceback.format_exception(error))
    return storable_text(scrubbed(text, secrets), MAX_TRACEBACK_CHARACTERS)


def _text(error: BaseException) -> str:
    """`Type: message`, even when the exception's own __str__ fails."""
    try:
        message = str(error)
    except Exception:
        message = f"<{type(error).__name__} whose str() failed>"
    return f"{type(error).__name__}: {message}"
