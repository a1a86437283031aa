"""Jobs: one closed set of states, one transition table, one record type.

    enqueue ──► queued ──claim──► running ──► succeeded
                  ▲  │              │  │
       retry,     │  │ cancel       │  ├──► failed ──retry──► queued
       rescue,    │  ▼              │  │
       release    │ cancelled ◄─────┘  └──► waiting (a parent, for its pieces)
                  └─────────────────────────── (failed attempt with attempts left)

`queued` covers both "due now" and "delayed until run_at". A running job
holds a lease (`lease_expires_at`) and a fencing token (`lease_token`, bumped
by every claim); writes about a running job name both and change nothing when
the token is stale.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES

    @property
    def is_active(self) -> bool:
        return not self.is_final


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.QUEUED,
            JobState.CANCELLED,
            JobState.WAITING,
        }
    ),
    JobState.WAITING: frozenset(
        {JobState.QUEUED, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.FAILED: frozenset({JobState.QUEUED}),
    JobState.CANCELLED: frozenset({JobState.QUEUED}),
    JobState.SUCCEEDED: frozenset(),
}


def can_transition(current: JobState, target: JobState) -> bool:
    return target in TRANSITIONS[current]


@dataclass(frozen=True, slots=True)
class AttemptError:
    """What went wrong in one attempt, kept on the job for every attempt."""

    attempt: int
    error: str
    traceback: str | None
    at: datetime | None
    kind: str = "error"  # error | timeout | lease_lost | unknown_task | cancelled

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptError:
        at = data.get("at")
        return cls(
            attempt=int(data.get("attempt", 0)),
            error=str(data.get("error", "")),
            traceback=data.get("traceback"),
            at=datetime.fromisoformat(at) if isinstance(at, str) else None,
            kind=str(data.get("kind", "error")),
        )


@dataclass(frozen=True, slots=True)
class Pieces:
    total: int
    succeeded: int
    failed: int

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed


@dataclass(slots=True)
class Job:
    """A snapshot of one job, as read from (or just written to) the store.

    Not frozen, only because frozen dataclasses are several times slower to
    build and enqueue_many builds thousands: treat it as read-only.
    """

    id: int
    task: str
    queue: str
    priority: int
    state: JobState
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    run_at: datetime
    attempt: int
    max_attempts: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    lease_expires_at: datetime | None = None
    worker: str | None = None
    key: str | None = None
    last_error: str | None = None
    errors: tuple[AttemptError, ...] = field(default=())
    result: Any = None
    deduplicated: bool = False
    """True when enqueue found a job with the same key and returned it instead."""
    schedule: str | None = None
    """The schedule that started this job, if any..."""
    scheduled_for: datetime | None = None
    """...and the scheduled time it runs for."""
    cancel_requested: bool = False
    checkpoint: Any = None
    """The last value saved with ctx.checkpoint: a retry resumes from it."""
    progress: dict[str, Any] | None = None
    """{"done": .., "total": .., "message": ..}: from ctx.progress, or a parent's pieces."""
    stuck: bool = False
    """Running, but its progress has not moved for its task's stuck_after."""
    parent_id: int | None = None
    pieces: Pieces | None = None
    """For a parent: how its pieces stand."""
    held: bool = False
    """A piece (or parent) of a paused group: not started until resumed."""
    warning: str | None = None
    """Succeeded, but its result failed the task's check=: the problem found."""

    @property
    def is_final(self) -> bool:
        return self.state.is_final
