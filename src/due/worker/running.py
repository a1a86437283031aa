"""What the worker knows about a job it holds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from due.core.records import ClaimedJob, Lease
from due.long_work.context import Context
from due.task import Task

if TYPE_CHECKING:
    from due.worker.ledger import RunningJobs

TRUST_MARGIN_FRACTION = 0.2
"""A lease is trusted until `renewal sent + lease * (1 - margin)` on this host's
monotonic clock: if no renewal succeeded by then (database unreachable, process
paused), the worker treats the lease as lost without waiting to be told."""


def trusted_until(sent_at: float, lease_seconds: float) -> float:
    return sent_at + lease_seconds * (1 - TRUST_MARGIN_FRACTION)


@dataclass(eq=False)
class RunningJob:
    job: ClaimedJob
    task: Task[Any, Any]
    jobs: RunningJobs
    """The ledger of its queue."""
    lease_seconds: float
    trusted_until: float
    handle: asyncio.Task[None] | None = None
    finished: bool = False
    """The handler has ended; its completion waits to be written."""
    lost_reason: str | None = None
    straggler: asyncio.Future[Any] | None = None
    """A sync handler's thread still running past its timeout: the job keeps its
    slot and lease until it returns."""
    context: Context | None = None
    """The handler's context, when it declares one (progress, cancellation flags)."""
    cancel_requested: bool = False
    stop_reason: str | None = None
    """Why its handler was told to stop at its next safe point (a shutdown)."""
    start_said: bool = False
    """The store knows its handler began (or was about to: a last attempt's)."""
    start_refused: bool = False
    """Its handler was about to begin and did not: its lease was no longer trusted."""
    start_unsent: bool = False
    """Its handler has begun, and no heartbeat answered has said so yet: until
    one has, a rescue would give the job back without counting the attempt."""
    seconds: float | None = None
    """How long its handler ran, once it has ended (for the log line of its end)."""
    start_by: float | None = None
    """For a job that counts against a rate: its handler begins by then (this
    host's monotonic clock), or not at all (core/limits.py, start_tolerance)."""
    late: bool = False
    """Its handler did not begin: it was past `start_by`; the job is handed back."""

    @property
    def queue(self) -> str:
        return self.jobs.queue

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    @property
    def completed_in_transaction(self) -> bool:
        """Its handler's own transaction recorded its success (ctx.transaction())."""
        return self.context is not None and self.context.completed_in_transaction

    @property
    def lease(self) -> Lease:
        return Lease(self.job.id, self.job.lease_token, self.lease_seconds)

    def lease_with_progress(self) -> Lease:
        """The lease for a heartbeat, carrying progress that moved since the last
        one, and whether the handler began since the last answered one."""
        context = self.context
        if context is None or not context.progress_dirty:
            progress = None
        else:
            context.progress_dirty = False
            progress = context.progress_json()
        job = self.job
        return Lease(job.id, job.lease_token, self.lease_seconds, progress, self.start_unsent)

    def progress_unsent(self) -> None:
        """A heartbeat carrying progress failed: send it again with the next one."""
        if self.context is not None and self.context.last_progress is not None:
            self.context.progress_dirty = True
