"""Instrumentation hooks: the one door through which tracing sees jobs.

Nothing is registered unless an integration registers it (`due.contrib.
opentelemetry`); where a hook would be called the core then pays one
truthiness check of a list, and stores nothing.

- An **enqueue hook** is called as each job is prepared (`request.prepare`:
  every enqueue, bulk enqueue, workflow step and piece) and as the scheduler
  makes a schedule's run (`store/schedules.py`), given a `Sending`. It returns
  string headers (a trace context) or None. The headers of all hooks are
  stored with the job, in its payload beside `args` and `kwargs`:
  `{"args": [...], "kwargs": {...}, "headers": {...}}`, so no column is added
  and a retry, which keeps its row, keeps them. They are not arguments: the
  readers of a payload take `args` and `kwargs` only, and a piece is known by
  its arguments (`NewJob.identity`), never by its headers.
- An **attempt hook** is called as a worker starts an attempt, given an
  `AttemptInfo` (the job's task, queue, id, attempt, schedule, stored headers,
  and the headers its first attempt kept). It returns an `AttemptObserver` or
  None. The executor enters `observer.running()` around the handler where the
  handler runs (a sync handler's thread, or the event loop), and calls
  `observer.ended(...)` with the attempt's end. The headers `ended` returns
  are kept with the attempt's entry in the job's history (a failed, timed out
  or cancelled attempt has one; a success or a lost lease has none), and every
  later attempt is given those of the earliest entry that kept any: that is
  how a retry finds its first attempt.

A hook must not raise: what one raises is logged and ignored (a job is never
refused, nor an attempt failed, because tracing failed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from due.core.jobs import JobState
from due.core.records import ClaimedJob
from due.logs import event

HEADERS = "headers"
"""The payload's key for the headers, beside "args" and "kwargs"; and the key
of an attempt's entry in a job's history for the headers kept with it."""

log = logging.getLogger("due.instrumentation")


@dataclass(frozen=True, slots=True)
class Sending:
    """A job being prepared for the store: what an enqueue hook is given."""

    task: str
    queue: str
    schedule: str | None = None
    """The schedule whose run it is (made by the scheduler), else None."""


@dataclass(slots=True)  # not frozen: made for every attempt, and frozen is slow
class AttemptInfo:
    """An attempt about to start: what an attempt hook is given (to read only)."""

    job_id: int
    task: str
    queue: str
    attempt: int
    """From 1."""
    schedule: str | None
    """The schedule whose run the job is, else None."""
    headers: Mapping[str, str]
    """The headers stored with the job as it was enqueued (empty: none)."""
    first_attempt: Mapping[str, str]
    """The headers kept by the job's earliest attempt that kept any (empty:
    none, as on a first attempt)."""


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How an attempt ended."""

    state: JobState | None
    """What it ends in: SUCCEEDED (written by the worker, or by the handler's own
    `ctx.transaction`), QUEUED (a retry), FAILED, CANCELLED or WAITING (for
    its pieces); None when nothing is written (its lease was lost)."""
    error: BaseException | None = None
    """What the handler raised (a TimeoutError for a timeout), when it failed:
    for its type. Its text is `message`, never `str(error)`."""
    message: str | None = None
    """The error's message as the job's history keeps it: every redacted
    argument value hidden (due.shown_arguments.scrubbed), so that a trace
    shows no more than `due show` does (invariant 16)."""
    traceback: str | None = None
    """Its traceback as the history keeps it, hidden alike (None: none)."""


class AttemptObserver(Protocol):
    """What an attempt hook returns to follow one attempt."""

    def running(self) -> AbstractContextManager[object]:
        """Entered around the handler, in the thread or on the loop where it runs."""
        ...

    def ended(self, end: AttemptEnd) -> Mapping[str, str] | None:
        """The attempt's end; returns the headers to keep with its entry in
        the job's history (or None)."""
        ...


EnqueueHook = Callable[[Sending], Mapping[str, str] | None]
AttemptHook = Callable[[AttemptInfo], AttemptObserver | None]

enqueue_hooks: list[EnqueueHook] = []
"""The registered enqueue hooks (empty: nothing is called, nothing stored)."""
attempt_hooks: list[AttemptHook] = []
"""The registered attempt hooks (empty: nothing is called)."""


def add_enqueue_hook(hook: EnqueueHook) -> None:
    """Call `hook` for every job prepared from now on (once, however often added)."""
    if hook not in enqueue_hooks:
        enqueue_hooks.append(hook)


def remove_enqueue_hook(hook: EnqueueHook) -> None:
    """Stop calling `hook` (nothing when it was not added)."""
    if hook in enqueue_hooks:
        enqueue_hooks.remove(hook)


def add_attempt_hook(hook: AttemptHook) -> None:
    """Call `hook` for every attempt started from now on (once, however often added)."""
    if hook not in attempt_hooks:
        attempt_hooks.append(hook)


def remove_attempt_hook(hook: AttemptHook) -> None:
    """Stop calling `hook` (nothing when it was not added)."""
    if hook in attempt_hooks:
        attempt_hooks.remove(hook)


def headers_for(sending: Sending) -> dict[str, str] | None:
    """The headers the enqueue hooks give a job (None: none)."""
    headers: dict[str, str] = {}
    for hook in tuple(enqueue_hooks):
        try:
            given = hook(sending)
        except Exception as error:
            event(log, "instrumentation.hook_failed", logging.WARNING, error=repr(error))
            continue
        if given:
            headers.update((str(name), str(value)) for name, value in given.items())
    return headers or None


NO_HEADERS: Mapping[str, str] = MappingProxyType({})
"""The headers of a job that has none (one shared, read-only mapping)."""


def observers_for(info: AttemptInfo) -> list[AttemptObserver]:
    """The observers the attempt hooks give an attempt (often one, or none)."""
    observers = []
    for hook in attempt_hooks:
        try:
            observer = hook(info)
        except Exception as error:
            event(log, "instrumentation.hook_failed", logging.WARNING, error=repr(error))
            continue
        if observer is not None:
            observers.append(observer)
    return observers


def attempt_info(job: ClaimedJob) -> AttemptInfo:
    """What the attempt hooks are told of a claimed job's attempt."""
    return AttemptInfo(
        job.id,
        job.task,
        job.queue,
        job.attempt,
        job.schedule,
        job.headers or NO_HEADERS,
        job.first_attempt or NO_HEADERS,
    )


def running(observers: list[AttemptObserver]) -> ExitStack:
    """The observers' `running()` entered together (exited around the handler)."""
    stack = ExitStack()
    for observer in observers:
        try:
            stack.enter_context(observer.running())
        except Exception as error:
            event(log, "instrumentation.hook_failed", logging.WARNING, error=repr(error))
    return stack


def ended(observers: list[AttemptObserver], end: AttemptEnd) -> dict[str, str] | None:
    """Tell each observer how the attempt ended; the headers they keep (None: none)."""
    kept: dict[str, str] = {}
    for observer in observers:
        try:
            given = observer.ended(end)
        except Exception as error:
            event(log, "instrumentation.hook_failed", logging.WARNING, error=repr(error))
            continue
        if given:
            kept.update((str(name), str(value)) for name, value in given.items())
    return kept or None
