"""Helpers for testing code that uses `due`, without sleeping.

`drain` runs jobs in this process through the same executor a worker uses,
against the app's real store, until no job is due by the app's clock; a
`FakeClock` moves that clock:

>>> import due
>>> from due.testing import FakeClock, drain
>>> clock = FakeClock()
>>> app = due.App("sqlite:///test.db", clock=clock)
>>> @app.task()
... def send_email(user_id: int) -> str:
...     return f"sent to {user_id}"
>>> _ = app.migrate()
>>> job = send_email.options(delay="1h").enqueue(42)
>>> drain(app).succeeded  # not due yet
[]
>>> _ = clock.advance("1h")
>>> drain(app).succeeded == [job.id]
True
>>> app.get(job.id).result
'sent to 42'
>>> app.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass, field

from due.app import App
from due.clock import FakeClock
from due.core.jobs import JobState
from due.core.records import ClaimedJob, ClaimRequest
from due.worker.executor import Executor

__all__ = ["DrainResult", "FakeClock", "adrain", "drain", "empty"]

DRAIN_WORKER = "due.testing.drain"
DRAIN_LEASE_SECONDS = 300.0


@dataclass
class DrainResult:
    """What a drain ran: job ids by how their attempt ended, in the order they ran."""

    succeeded: list[int] = field(default_factory=list)
    """Jobs whose attempt succeeded."""
    failed: list[int] = field(default_factory=list)
    """Jobs that failed for good (no attempt left, or not retried)."""
    retried: list[int] = field(default_factory=list)
    """Jobs whose attempt failed and that are queued again (a job retried at once
    by the drain is listed once per failed attempt)."""
    cancelled: list[int] = field(default_factory=list)
    """Jobs that ended cancelled."""
    waiting: list[int] = field(default_factory=list)
    """Parents that spawned pieces and now wait for them (drain runs the pieces too)."""

    @property
    def attempts(self) -> int:
        """How many attempts the drain ran, whatever their outcome."""
        return sum(
            len(ids)
            for ids in (self.succeeded, self.failed, self.retried, self.cancelled, self.waiting)
        )


def drain(app: App, *, queues: list[str] | None = None, max_attempts: int = 10_000) -> DrainResult:
    """Run jobs due by the app's clock until none is due.

    A failed attempt whose retry is scheduled in the future stays queued: move
    a FakeClock past it and drain again. Only the app's own tasks are run.

    Args:
        app: The app whose jobs to run (its store must be migrated).
        queues: Only these queues (default: every queue with due jobs).
        max_attempts: Stop after this many attempts, in case jobs keep
            enqueuing jobs.

    Returns:
        The ids of the jobs run, by how their attempt ended.

    Raises:
        RuntimeError: It was called inside an event loop: use `adrain`.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(adrain(app, queues=queues, max_attempts=max_attempts))
    raise RuntimeError("drain() was called inside an event loop; use `await adrain(app)`")


async def adrain(
    app: App, *, queues: list[str] | None = None, max_attempts: int = 10_000
) -> DrainResult:
    """`drain` for async tests, awaited.

    Args:
        app: The app whose jobs to run (its store must be migrated).
        queues: Only these queues (default: every queue with due jobs).
        max_attempts: Stop after this many attempts.

    Returns:
        The ids of the jobs run, by how their attempt ended.
    """
    result = DrainResult()
    store = app.store
    if len(app.limits):
        app.sync_limits()
    threads = concurrent.futures.ThreadPoolExecutor(max_workers=4)
    executor = Executor(app.tasks, app.clock, threads=threads, app=app, worker=DRAIN_WORKER)
    try:
        while result.attempts < max_attempts:
            job = _claim_next(app, queues)
            if job is None:
                break
            attempt = await executor.run(job)
            if attempt.completion is None:
                # Its own transaction recorded the success (or its lease was lost,
                # which a drain with one claimant cannot see).
                if not attempt.lease_lost:
                    result.succeeded.append(job.id)
                continue
            store.job_complete([attempt.completion])
            _record(result, job.id, attempt.completion.state)
    finally:
        # A sync handler past its timeout may still be running: do not wait for it.
        threads.shutdown(wait=False)
    return result


def empty(app: App) -> None:
    """Delete everything due keeps in the app's database, between tests.

    Every job, workflow, schedule (and its runs), worker, limit, paused queue,
    figure and action taken by hand goes; the schema stays, as `migrate` left
    it. The app's own limits are written again, as its first enqueue would.
    For a test database only: it asks nothing before it deletes. Django's
    `TransactionTestCase` does it for you with due's test runner
    (docs/howto/django.md).
    """
    app.store.empty()
    app.sync_limits()  # (none declared: nothing written)


def _claim_next(app: App, queues: list[str] | None) -> ClaimedJob | None:
    store = app.store
    limited = len(app.limits) > 0
    if limited:  # jobs waiting for a limit with room again become claimable
        store.limit_reopen()
    for queue in queues or store.queue_due_names():
        claimed = store.job_claim(
            ClaimRequest(
                queue,
                1,
                DRAIN_WORKER,
                DRAIN_LEASE_SECONDS,
                tasks=app.tasks.names(),
                limited=limited,
            )
        )
        if claimed:
            return claimed[0]
    return None


def _record(result: DrainResult, job_id: int, state: JobState) -> None:
    {
        JobState.SUCCEEDED: result.succeeded,
        JobState.FAILED: result.failed,
        JobState.QUEUED: result.retried,
        JobState.CANCELLED: result.cancelled,
        JobState.WAITING: result.waiting,
    }[state].append(job_id)
