"""Jobs: one closed set of states, one transition table, one record type.

The transitions (TRANSITIONS below; docs/reference/states.md draws the same,
and a test holds both to the table)::

    (enqueue) ──────────────────────────────────────────► queued

    queued ───┬─ claimed by a worker ───────────────────► running
              ├─ cancelled ─────────────────────────────► cancelled
              └─ no live worker knew its task ──────────► failed

    running ──┬─ the handler returned ──────────────────► succeeded
              ├─ failed for good (no attempt left) ─────► failed
              ├─ failed with attempts left, rescued
              │  or released at shutdown ───────────────► queued
              ├─ asked to stop ─────────────────────────► cancelled
              └─ spawned pieces ────────────────────────► waiting

    waiting ──┬─ its last piece (or completion) ended ──► succeeded
              ├─ a piece or its completion failed ──────► failed
              └─ cancelled, or its parent went ─────────► cancelled

    failed ───── retried by hand ───────────────────────► queued
    cancelled ── retried by hand ───────────────────────► queued

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

from due.core.limits import shown_key
from due.shown_arguments import shown_arguments


class JobState(enum.StrEnum):
    """Where a job stands: one of six states (a `str`, so `state == "failed"` holds).

    The reference's job states page draws the transitions between them.
    """

    QUEUED = "queued"
    """Waiting to run, due now or delayed until its `run_at`."""
    RUNNING = "running"
    """Claimed by a worker, which holds its lease."""
    WAITING = "waiting"
    """A parent, waiting for its pieces (it holds no worker slot)."""
    SUCCEEDED = "succeeded"
    """Ended, its handler returned (final)."""
    FAILED = "failed"
    """Ended, with no attempt left or a failure not retried (final; retryable by hand)."""
    CANCELLED = "cancelled"
    """Ended, cancelled by someone (final; retryable by hand)."""

    @property
    def is_final(self) -> bool:
        """Whether a job in this state has ended (succeeded, failed or cancelled)."""
        return self in FINAL_STATES

    @property
    def is_active(self) -> bool:
        """Whether a job in this state has not ended yet (queued, running or waiting)."""
        return not self.is_final


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # A queued job fails without running when no live worker of its queue knows
    # its task past a grace period (maintenance/unknown_tasks.py).
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.QUEUED,
            JobState.CANCELLED,
            JobState.WAITING,
        }
    ),
    JobState.WAITING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.FAILED: frozenset({JobState.QUEUED}),
    JobState.CANCELLED: frozenset({JobState.QUEUED}),
    JobState.SUCCEEDED: frozenset(),
}


def can_transition(current: JobState, target: JobState) -> bool:
    """Whether a job may move from `current` to `target` (the TRANSITIONS table)."""
    return target in TRANSITIONS[current]


@dataclass(frozen=True, slots=True)
class AttemptError:
    """What went wrong in one attempt, kept on the job for every attempt (`Job.errors`)."""

    attempt: int
    """The attempt's number, from 1 (0 when the history cannot be read)."""
    error: str
    """The error, as its type and message, or what `due` found (a lost lease...)."""
    traceback: str | None
    """The traceback as the handler raised it, when there was one."""
    at: datetime | None
    """When the attempt ended."""
    kind: str = "error"
    """One of `error`, `timeout`, `lease_lost`, `unknown_task`, `cancelled`."""
    exception: str | None = None
    """The class of the exception the handler raised, as `module.QualName` (or None)."""
    worker: str | None = None
    """The worker that ran the attempt, when known."""
    headers: dict[str, str] | None = field(default=None, compare=False)
    """What an attempt hook kept with this entry (`due.instrumentation`), if
    anything (not compared: an entry is hashable)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptError:
        """Read one entry of a job's stored history.

        Args:
            data: The entry as stored (JSON), with `attempt`, `kind`, `error`,
                `traceback` and `at` (ISO 8601); a missing one takes its default.

        Returns:
            The attempt's error.
        """
        at = data.get("at")
        return cls(
            attempt=int(data.get("attempt", 0)),
            error=str(data.get("error", "")),
            traceback=data.get("traceback"),
            at=datetime.fromisoformat(at) if isinstance(at, str) else None,
            kind=str(data.get("kind", "error")),
            exception=_text_or_none(data.get("exception")),
            worker=_text_or_none(data.get("worker")),
            headers=_texts_or_none(data.get("headers")),
        )


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _texts_or_none(value: Any) -> dict[str, str] | None:
    """A mapping of text to text as stored, or None (nothing kept, or not that)."""
    if not isinstance(value, dict):
        return None
    return {key: item for key, item in value.items() if isinstance(item, str)} or None


@dataclass(frozen=True, slots=True)
class Pieces:
    """How a parent's pieces stand (`Job.pieces`)."""

    total: int
    """How many pieces it has."""
    succeeded: int
    """How many ended `succeeded`."""
    failed: int
    """How many ended `failed` or `cancelled`."""

    @property
    def ended(self) -> int:
        """How many have ended, whatever their outcome."""
        return self.succeeded + self.failed


@dataclass(slots=True)
class Job:
    """A snapshot of one job, as read from (or just written to) the store.

    What `enqueue`, `app.get`, `app.jobs` and `app.wait` return; read it
    again with `app.get(job.id)` to see what changed since.

    Not frozen, only because frozen dataclasses are several times slower to
    build and enqueue_many builds thousands: treat it as read-only.
    """

    id: int
    """The job's id, unique in its database."""
    task: str
    """The name of its task."""
    queue: str
    """The queue it runs in."""
    priority: int
    """Higher runs first within its queue."""
    state: JobState
    """Where it stands now."""
    args: tuple[Any, ...]
    """Its positional arguments, as stored (in JSON types, so tuples come back as lists)."""
    kwargs: dict[str, Any]
    """Its keyword arguments, as stored."""
    run_at: datetime
    """When it is (or was) due; a retry's backoff moves it."""
    attempt: int
    """How many attempts have started (0 before the first)."""
    max_attempts: int
    """How many attempts it may have in all (its task's `Retry`)."""
    created_at: datetime
    """When it was enqueued."""
    started_at: datetime | None = None
    """When its latest attempt started."""
    finished_at: datetime | None = None
    """When it ended (None while it has not)."""
    lease_expires_at: datetime | None = None
    """While it runs, when its worker's lease ends unless renewed."""
    worker: str | None = None
    """The worker that ran (or runs) its latest attempt."""
    key: str | None = None
    """The key it was enqueued with (`options(key=...)`), if any."""
    last_error: str | None = None
    """The error of its latest failed attempt."""
    errors: tuple[AttemptError, ...] = field(default=())
    """Every failed or stopped attempt's error, oldest first."""
    result: Any = None
    """What its handler returned (JSON types), once it succeeded."""
    deduplicated: bool = False
    """True when enqueue found a job with the same key and returned it instead."""
    schedule: str | None = None
    """The schedule that started this job, if any..."""
    scheduled_for: datetime | None = None
    """...and the scheduled time it runs for."""
    cancel_requested: bool = False
    """Someone asked it to stop while it ran (it stops at its next safe point)."""
    checkpoint: Any = None
    """The last value saved with `ctx.checkpoint`, which a retry resumes from."""
    progress: dict[str, Any] | None = None
    """`{"done", "total", "message"}` from `ctx.progress`, or a parent's pieces."""
    stuck: bool = False
    """Running, but its progress has not moved for its task's `stuck_after`."""
    parent_id: int | None = None
    """For a piece, the id of the parent that waits for it."""
    pieces: Pieces | None = None
    """For a parent, how its pieces stand."""
    held: bool = False
    """A piece (or parent) of a paused group, not started until resumed."""
    warning: str | None = None
    """Succeeded, but its result failed the task's `check=`; the problem found."""
    limits: tuple[tuple[str, str | None], ...] = ()
    """The limits it counts against, as (limit, key) pairs, the key None for a
    whole limit. A key made from a redacted argument is stored after `•••:`
    (the claim uses it whole; due shows it as `•••`)."""
    limit_wait: str | None = None
    """The limit it waits for, queued until that limit has room again (or None)."""
    limit_wait_key: str | None = None
    """The key of that limit it waits for (None for the whole limit)."""
    workflow_id: int | None = None
    """The workflow it is a step of (`app.workflow_status`), or None."""
    step_name: str | None = None
    """Its name in that workflow."""
    redact: tuple[str | int, ...] = ()
    """What its arguments are shown without, stored at enqueue beyond the
    defaults: names (lower-case) and positions (due.shown_arguments)."""

    def __repr__(self) -> str:
        # Its arguments as due shows them (the defaults and what it stored
        # hidden): a job logged with %r shows no secret (invariant 16).
        args, kwargs = shown_arguments(self)
        shown = {
            "args": tuple(args),
            "kwargs": kwargs,
            "limits": tuple((name, shown_key(key)) for name, key in self.limits),
            "limit_wait_key": shown_key(self.limit_wait_key),
        }
        text = ", ".join(
            f"{name}={shown.get(name, getattr(self, name))!r}" for name in self.__dataclass_fields__
        )
        return f"{type(self).__qualname__}({text})"

    @property
    def is_final(self) -> bool:
        """Whether the job has ended (succeeded, failed or cancelled)."""
        return self.state.is_final
