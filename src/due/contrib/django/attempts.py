"""When a Django task's first attempt started, kept in due's history of its attempts.

Django's `TaskResult.started_at` is the start of the first attempt, and
`last_attempted_at` that of the latest; a due job keeps only its latest
attempt's start. So an attempt hook (`due.instrumentation`) notes when each
attempt of a Django task starts, and keeps it with the entry due writes in
the job's history when that attempt ends without success (failed and retried,
failed for good, timed out, cancelled) — until one has: the earliest entry
that kept it says when the first attempt started, and an attempt that
succeeds needs none (it is then the latest one too). It costs no write: the
entry is written anyway, in the same statement.

A first attempt whose worker died leaves no such entry (its lease ran out):
the next attempt's start is then the earliest known.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import datetime

from due.clock import SystemClock
from due.core.jobs import Job
from due.instrumentation import AttemptEnd, AttemptInfo

STARTED = "django.started_at"
"""The key an attempt's start is kept under, with its entry in the job's history."""

_clock = SystemClock()
_this_attempt: ContextVar[datetime | None] = ContextVar("due_django_attempt", default=None)


def first_started_at(job: Job) -> datetime | None:
    """When the job's first attempt started (None before it has)."""
    for error in job.errors:
        kept = (error.headers or {}).get(STARTED)
        if kept:
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(kept)
    return job.started_at


def this_attempt_started() -> datetime:
    """When the attempt running in this thread (or task) started, as its hook saw it."""
    return _this_attempt.get() or _clock.wall()


class AttemptStart:
    """An attempt hook's observer (due.instrumentation) of one attempt of a Django
    task: when it started, kept with its entry unless an earlier one's was."""

    def __init__(self, info: AttemptInfo) -> None:
        self.at = _clock.wall()
        self.keep = STARTED not in info.first_attempt

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        # Entered where the handler runs: the handler reads its start from here.
        token = _this_attempt.set(self.at)
        try:
            yield
        finally:
            _this_attempt.reset(token)

    def ended(self, end: AttemptEnd) -> Mapping[str, str] | None:
        return {STARTED: self.at.isoformat()} if self.keep else None
