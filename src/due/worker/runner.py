"""The runner: starts the handlers of held jobs and records how they end.

A job claimed by its queue's producer is held here (`hold`), started in a
slot (`launch`), run by the executor, and its outcome recorded in the
queue's ledger for the completer to write; the slot frees when the handler
ends (see ledger.py for the back-pressure). The runner also stops jobs:
when their lease is lost (`lease_lost`: at the next safe point, and nothing
more is written for them) and when someone asks (`request_cancel`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from due.app import App
from due.clock import Clock
from due.core.jobs import JobState
from due.core.records import ClaimedJob
from due.errors import InvalidJobError
from due.limits import job_limits
from due.logs import event
from due.worker.executor import Executor
from due.worker.ledger import RunningJobs
from due.worker.outcomes import Attempt
from due.worker.running import RunningJob, trusted_until

log = logging.getLogger("due.worker")


class Runner:
    def __init__(
        self,
        *,
        app: App,
        executor: Executor,
        clock: Clock,
        default_lease: float,
        find: Callable[[int], RunningJob | None],
        cancel_grace: Callable[[], float],
        on_held: Callable[[RunningJob], None] = lambda running: None,
        confirm_start: Callable[[RunningJob], Awaitable[bool]] | None = None,
        database_now: Callable[[], datetime] | None = None,
        too_late: Callable[[RunningJob], None] = lambda running: None,
        limited_now: Callable[[RunningJob, str], None] = lambda running, limits: None,
        unbegun: Callable[[RunningJob], None] = lambda running: None,
    ) -> None:
        """`database_now` (the worker's estimate of the database's clock) places
        a rate-limited job's latest start on this host's clock; `too_late`
        hands back a job whose handler was too late to begin; `limited_now`
        hands back, with its limits written, a job stored without the limits
        its task counts against in this code; `unbegun` a last attempt whose
        start was recorded but whose handler did not begin (hand_backs.py)."""
        self._app = app
        self._executor = executor
        self._clock = clock
        self._default_lease = default_lease
        self._find = find
        self._cancel_grace = cancel_grace
        self._on_held = on_held
        self._confirm = confirm_start
        self._database_now = database_now
        self._too_late = too_late
        self._limited_now = limited_now
        self._unbegun = unbegun

    def hold(self, job: ClaimedJob, jobs: RunningJobs, claimed_at: float) -> RunningJob:
        """Hold a job just claimed (its lease trusted from when the claim was sent)."""
        task = self._app.tasks.get(job.task)
        lease = task.config.lease or self._default_lease
        running = RunningJob(job, task, jobs, lease, trusted_until(claimed_at, lease))
        if job.start_by is not None and self._database_now is not None:
            ahead = job.start_by - self._database_now().timestamp()
            running.start_by = self._clock.monotonic() + ahead
        if task.context_parameter is not None:
            running.context = self._executor.context_for(job, task)
            if running.context is not None:
                running.context.trusted = functools.partial(self._trusts, running)
        jobs.hold(running)
        self._on_held(running)
        return running

    def _trusts(self, running: RunningJob) -> bool:
        return self._clock.monotonic() <= running.trusted_until

    def _starts(self, running: RunningJob) -> bool:
        """Asked once, right before the handler begins (in its thread, for a sync
        one): whether it may, and if so the next heartbeat says it began (a plain
        attribute written: the loop reads it at the next beat)."""
        trusted = self._trusts(running)
        if not trusted:
            running.start_refused = True
            return False
        if running.start_by is not None and self._clock.monotonic() > running.start_by:
            # A rate counts its starts as its handlers begin, give or take its
            # tolerance: past it, this one would crowd the next window.
            running.late = True
            return False
        if not running.start_said:
            running.start_unsent = True
        return trusted

    def _give_back_unbegun(self, running: RunningJob) -> None:
        """A last attempt whose start the store recorded, but whose handler did
        not begin (the record's reply came back after its lease stopped being
        trusted): hand the job back now, its attempt not counted, rather than
        leave a rescue to count an attempt that never ran (invariant 12). The
        release is fenced: should another worker have taken the job, or a
        rescue ended it meanwhile, it changes nothing."""
        if running.start_said:
            self._unbegun(running)

    async def _confirm_start(self, running: RunningJob) -> bool:
        """Only a start that ran is an attempt, and a last attempt must not run
        uncounted: its start is recorded before its handler begins."""
        return True if self._confirm is None else await self._confirm(running)

    def launch(self, running: RunningJob, jobs: RunningJobs) -> None:
        if log.isEnabledFor(logging.DEBUG):  # its fields are built only for a line written
            job = running.job
            event(log, "job.started", logging.DEBUG, job=job.id, task=job.task, attempt=job.attempt)
        # The loop's own create_task: asyncio.create_task adds two Python calls a job.
        running.handle = asyncio.get_running_loop().create_task(self._execute(running, jobs))

    async def _execute(self, running: RunningJob, jobs: RunningJobs) -> None:
        if not running.job.limited and running.task.config.limits and self._limits_now(running):
            jobs.handler_ended()
            return
        try:
            if running.job.attempt >= running.job.max_attempts and not await self._confirm_start(
                running
            ):
                # Its last attempt, and the store could not be told it begins: it
                # does not, and goes back uncounted when its lease expires.
                self.lease_lost(running, "the start of its last attempt could not be recorded")
                self._give_back_unbegun(running)
                jobs.handler_ended()
                return
            attempt = await self._executor.run(
                running.job,
                running.context,
                functools.partial(self._starts, running),
                running.task,
                functools.partial(_stopped_at_an_await, running),
            )
        except asyncio.CancelledError:
            # The outcome is recorded before the slot frees: it keeps the slot until written.
            stopped_in = _stopped_at_an_await(running)
            if stopped_in is JobState.SUCCEEDED:
                jobs.forget(running)  # its success is written; the token moved on with it
            elif stopped_in is JobState.CANCELLED:
                running.finished = True
                cancelled = self._executor.cancelled(running.job, running.context)
                jobs.record_outcome(running, cancelled)
            jobs.handler_ended()
            return  # otherwise the lease was lost or released: write nothing
        except BaseException as error:  # (not a task's exit either: invariant 17)
            # The executor turns every end into an outcome; should it fail, the job
            # still gets one (failed with the reason), never stays running.
            log.exception("job.executor_crashed job=%s", running.job.id)
            running.finished = True
            if not running.lost:
                crashed = self._executor.crashed(running.job, error, running.context)
                jobs.record_outcome(running, crashed)
            jobs.handler_ended()
            return
        if running.start_refused:
            self._give_back_unbegun(running)
        running.seconds = attempt.seconds
        if running.late:  # it never began: handed back, its attempt not spent
            running.lost_reason = "its handler was too late to begin for its rate limit"
            jobs.forget(running)
            jobs.handler_ended()
            self._too_late(running)
            return
        if attempt.straggler is None:
            running.finished = True
            # The outcome is recorded before the slot frees: it keeps the slot until written.
            self._record(running, jobs, attempt)
            jobs.handler_ended(attempt.seconds)
            return
        # A sync handler past its timeout keeps its thread, its slot and its lease
        # (heartbeats go on): the timeout is written when the thread returns, so the
        # retry cannot start while this attempt still runs.
        running.straggler = attempt.straggler
        event(
            log,
            "job.thread_still_running",
            logging.WARNING,
            job=running.job.id,
            task=running.job.task,
            timeout=running.task.config.timeout,
        )
        attempt.straggler.add_done_callback(
            lambda _: self._straggler_returned(running, jobs, attempt)
        )

    def _limits_now(self, running: RunningJob) -> bool:
        """A job stored as counting against no limit, of a task that counts
        against some in this code (a schedule's run stored before the task had
        them, a job of older code): handed back with them written, unstarted.
        Returns whether it was (or failed: its arguments give no key)."""
        job = running.job
        try:
            limits = job_limits(job.task, running.task.config.limits, job.args, job.kwargs, None)
        except InvalidJobError as error:
            running.finished = True
            running.jobs.record_outcome(
                running, self._executor.crashed(job, error, running.context)
            )
            return True
        if limits is None:
            return False
        running.lost_reason = "handed back to count against its task's limits"
        running.jobs.forget(running)
        self._limited_now(running, limits)
        return True

    def _straggler_returned(self, running: RunningJob, jobs: RunningJobs, attempt: Attempt) -> None:
        straggler = attempt.straggler
        if straggler is not None and not straggler.cancelled():
            straggler.exception()  # its late end, success or error, is discarded
        running.finished = True
        self._record(running, jobs, attempt)
        jobs.handler_ended()

    def _record(self, running: RunningJob, jobs: RunningJobs, attempt: Attempt) -> None:
        if attempt.lease_lost:  # stopped at a safe point: told to, or a write was fenced
            reason = running.stop_reason or (
                "not begun: its lease was no longer trusted"
                if running.start_refused
                else "a fenced write found the lease taken"
            )
            self.lease_lost(
                running, reason, logging.INFO if running.stop_reason else logging.WARNING
            )
        if running.lost:
            event(
                log,
                "job.result_discarded",
                logging.WARNING,
                job=running.job.id,
                task=running.job.task,
                reason=running.lost_reason,
            )
            return
        if attempt.completion is None:  # its own transaction recorded its success
            jobs.forget(running)
            job = running.job
            event(
                log,
                "job.succeeded",
                logging.INFO,
                job=job.id,
                task=job.task,
                queue=job.queue,
                attempt=job.attempt,
                duration_ms=round(attempt.seconds * 1000, 1),
            )
            return
        jobs.record_outcome(running, attempt.completion)

    def lease_lost(self, running: RunningJob, reason: str, level: int = logging.WARNING) -> None:
        """Stop a job at its next safe point and write nothing more for it."""
        if running.lost or running.completed_in_transaction:
            return  # (its success is written; the token moved on with it)
        if running.context is not None:
            running.context.lease_lost = True
        running.lost_reason = reason
        running.jobs.forget(running)
        job = running.job
        event(
            log,
            "job.lease_lost",
            level,
            job=job.id,
            task=job.task,
            attempt=job.attempt,
            reason=reason,
        )
        if running.handle is not None and running.task.is_async and not running.finished:
            running.handle.cancel()  # raises CancelledError at the handler's next await

    def stop_at_safe_point(self, running: RunningJob, reason: str) -> None:
        """Tell a running handler to stop (a shutdown after its grace): its next
        safe point raises LeaseLost, an async handler is cancelled at its next
        await. Its lease is still held: if it returns meanwhile, its outcome
        is recorded as usual."""
        running.stop_reason = reason
        if running.context is not None:
            running.context.lease_lost = True
        if running.handle is not None and running.task.is_async and not running.finished:
            running.handle.cancel()

    def request_cancel(self, job_id: int, via: str) -> None:
        """Someone asked a job this worker runs to stop.

        Not started yet (claimed ahead): it ends cancelled at once. An async
        handler with a context gets one heartbeat interval to stop at a safe point
        (its `finally` blocks run either way), then is cancelled at its next
        `await`; one without a context is cancelled at once. A sync handler stops
        at its next safe point (`ctx.progress`, `ctx.checkpoint`,
        `ctx.raise_if_cancelled`); one without any runs to its end, and that
        outcome stands.
        """
        running = self._find(job_id)
        if running is None or running.cancel_requested or running.lost or running.finished:
            return
        running.cancel_requested = True
        if running.context is not None:
            running.context.cancel_requested = True
        job = running.job
        event(log, "job.cancel_requested", job=job.id, task=job.task, via=via)
        jobs = running.jobs
        if running.handle is None:
            if running in jobs.ready:
                jobs.ready.remove(running)
            running.finished = True
            jobs.record_outcome(running, self._executor.cancelled(job, running.context))
        elif running.task.is_async:
            grace = 0.0 if running.context is None else self._cancel_grace()
            asyncio.get_running_loop().call_later(grace, self._hard_cancel, running)

    def _hard_cancel(self, running: RunningJob) -> None:
        if running.handle is None or running.finished or running.lost:
            return
        if running.completed_in_transaction:
            return  # it succeeded already; let it return
        running.handle.cancel()


def _stopped_at_an_await(running: RunningJob) -> JobState | None:
    """What an async attempt cancelled at an await ends in: its success when its
    own transaction wrote it, cancelled on a request (its lease still held),
    else nothing is written (its lease was lost, or released by a shutdown)."""
    if running.completed_in_transaction:
        return JobState.SUCCEEDED
    if running.cancel_requested and not running.lost:
        return JobState.CANCELLED
    return None
