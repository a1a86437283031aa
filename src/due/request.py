"""Enqueue requests and their validation: bad input is refused before any write."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, overload

from due import instrumentation
from due.core.records import NewJob
from due.durations import DurationLike, to_seconds
from due.errors import ArgumentsError, ConfigurationError, InvalidJobError
from due.instrumentation import Sending
from due.limits import job_limits
from due.payload import encode_arguments, unstorable, with_headers, with_redaction
from due.shown_arguments import DEFAULT_REDACT, hidden, secret_texts

if TYPE_CHECKING:
    from due.task import Task

MAX_QUEUE_LENGTH = 100
MAX_KEY_LENGTH = 255
MAX_PRIORITY = 1_000_000
LAST_RUN_AT_YEAR = 9998
"""A run_at after this year (in UTC) is refused: Python's datetime ends with 9999,
and a retry's backoff must still be writable after it."""
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:\-]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueOptions:
    """The options of an enqueue, defined once.

    What `task.options(...)`, `app.enqueue(...)` and a `JobRequest` take
    besides the arguments (and a connection), each checked by `prepare`.
    """

    delay: DurationLike | None = None
    """Due after this long (or at `run_at`; not both)."""
    run_at: datetime | None = None
    """Due at this aware datetime."""
    queue: str | None = None
    """Instead of the task's queue."""
    priority: int | None = None
    """Instead of the task's priority."""
    key: str | None = None
    """Deduplicate on this key while a job with it is active."""
    unique_for: DurationLike | None = None
    """Instead of the task's, how long the key keeps deduplicating after success."""
    limit_keys: Mapping[str, str] | None = None
    """The key of each named limit of the task, instead of its key function's."""

    def options(self) -> dict[str, Any]:
        """The options, by name (to make a request with them)."""
        return {name: getattr(self, name) for name in OPTION_NAMES}


OPTION_NAMES = tuple(f.name for f in fields(EnqueueOptions))


@dataclass(frozen=True, slots=True)
class JobRequest(EnqueueOptions):
    """One job to enqueue later, checked when it is enqueued.

    Made by `task.request(...)` (or `task.options(...).request(...)`), with
    the function's own arguments, and sent by `app.enqueue_many`; its options
    (`EnqueueOptions`: delay, run_at, queue, priority, key, unique_for,
    limit_keys) are given by keyword:

    >>> import due
    >>> app = due.App("sqlite:///requests.db")
    >>> @app.task()
    ... def greet(name: str) -> str:
    ...     return f"hello {name}"
    >>> _ = app.migrate()
    >>> requests = [greet.request("ada"), greet.options(delay="1h").request("bob")]
    >>> [job.state for job in app.enqueue_many(requests)]
    [<JobState.QUEUED: 'queued'>, <JobState.QUEUED: 'queued'>]
    >>> app.close()
    """

    task: str
    """The task's name."""
    args: tuple[Any, ...] = ()
    """The positional arguments."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """The keyword arguments."""


def prepare(request: JobRequest, task: Task[Any, Any], max_payload_bytes: int) -> NewJob:
    """Validate a request against its task; returns the row to insert."""
    if type(request.args) is not tuple or type(request.kwargs) is not dict:  # made by hand
        arguments_of(task.name, request.args, request.kwargs, task.redact)
    task.check_arguments(request.args, request.kwargs)
    if request.delay is not None and request.run_at is not None:
        raise InvalidJobError(f"enqueue of {task.name!r}: give either delay= or run_at=, not both")
    if request.unique_for is not None and request.key is None:
        raise InvalidJobError(
            f"enqueue of {task.name!r}: unique_for= says how long a key deduplicates; "
            "give a key= with it"
        )
    options = task.config  # validated when the task was defined
    queue = options.queue if request.queue is None else validate_queue(request.queue)
    payload = encode_arguments(task.name, request.args, request.kwargs, max_payload_bytes)
    redact = None
    if task.stores_redaction:  # most tasks need nothing stored: one check
        redact = task.stored_redaction(len(request.args))
        payload = with_redaction(payload, redact)
    if instrumentation.enqueue_hooks:  # empty unless tracing is on: one check
        payload = with_headers(payload, instrumentation.headers_for(Sending(task.name, queue)))
    job = NewJob(
        task.name,
        queue,
        options.priority if request.priority is None else validate_priority(request.priority),
        payload,
        request.args,
        request.kwargs,
        options.retry.max_attempts,
        None if request.run_at is None else _validate_run_at(request.run_at, task.name),
        0.0 if request.delay is None else _validate_delay(request.delay, task.name),
        None if request.key is None else validate_key(request.key),
        options.unique_for
        if request.unique_for is None
        else _validate_unique_for(request.unique_for, task.name),
        options.stuck_after,
        limits=_limits(task, request) if options.limits or request.limit_keys else None,
    )
    if redact:
        job.redact = tuple(redact)
    return job


def _limits(task: Task[Any, Any], request: JobRequest) -> str | None:
    """The limits of a job of `task`, its keys made from redacted values marked."""
    secrets = secret_texts(
        request.args, request.kwargs, task.redact, task.redacted_positions, min_length=1
    )
    args, kwargs = request.args, request.kwargs
    return job_limits(task.name, task.config.limits, args, kwargs, request.limit_keys, secrets)


def arguments_of(
    task: str, args: Any, kwargs: Any, redact: Collection[str] = DEFAULT_REDACT
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`args=` and `kwargs=` of `app.enqueue` (or of a JobRequest made by hand).

    Returned as a request holds them; ArgumentsError when they have the wrong
    shape (its message shows them with the values of `redact` hidden).
    """
    if isinstance(args, str | bytes | bytearray | Mapping) or not isinstance(args, Iterable):
        hint = " (keyword arguments go in kwargs=)" if isinstance(args, Mapping) else ""
        raise ArgumentsError(
            f"enqueue of {task!r}: args= takes a list or tuple of the positional arguments "
            f"(args=[42] for one), got {type(args).__name__} {hidden(args, redact)!r:.40}{hint}"
        )
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ArgumentsError(
            f"enqueue of {task!r}: kwargs= takes a dict of the keyword arguments by name, "
            f"got {type(kwargs).__name__} {hidden(kwargs, redact)!r:.40}"
        )
    return tuple(args), dict(kwargs or {})


class PreparedOnRead(Sequence[NewJob]):
    """Requests prepared as they are read, each once.

    For a bulk enqueue in the store's own transaction on PostgreSQL, whose rows
    go out in pipelined batches: each batch is prepared while the database
    inserts the batch before, instead of all before the first is sent. A
    request refused on the way raises its error as it would have before the
    transaction, and the transaction is rolled back: nothing is written.
    Never for a caller's connection, whose transaction is the caller's to end.
    """

    __slots__ = ("_jobs", "_prepare", "_requests")

    def __init__(
        self, requests: Sequence[JobRequest], prepare: Callable[[JobRequest], NewJob]
    ) -> None:
        self._requests = requests
        self._prepare = prepare
        self._jobs: dict[int, NewJob] = {}

    def __len__(self) -> int:
        return len(self._requests)

    @overload
    def __getitem__(self, index: int) -> NewJob: ...

    @overload
    def __getitem__(self, index: slice) -> PreparedOnRead: ...

    def __getitem__(self, index: int | slice) -> NewJob | PreparedOnRead:
        if isinstance(index, slice):
            return PreparedOnRead(self._requests[index], self._prepare)
        return self._job(range(len(self._requests))[index])  # negative indexes; IndexError

    def __iter__(self) -> Iterator[NewJob]:
        return map(self._job, range(len(self._requests)))

    def _job(self, index: int) -> NewJob:
        job = self._jobs.get(index)
        if job is None:
            job = self._jobs[index] = self._prepare(self._requests[index])
        return job


def validate_queue(queue: Any) -> str:
    """A queue name, checked: InvalidJobError says what is wrong with it."""
    if not isinstance(queue, str) or not queue:
        raise InvalidJobError(f"queue name must be a non-empty string, got {queue!r}")
    if len(queue) > MAX_QUEUE_LENGTH:
        raise InvalidJobError(
            f"queue name {queue[:20]!r}... is {len(queue)} characters; "
            f"the limit is {MAX_QUEUE_LENGTH}"
        )
    if not _QUEUE_NAME.fullmatch(queue):
        raise InvalidJobError(f"queue name {queue!r} may hold only letters, digits and _ . : -")
    return queue


def validate_priority(priority: Any) -> int:
    """A priority, checked: InvalidJobError says what is wrong with it."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidJobError(f"priority must be a whole number, got {priority!r}")
    if abs(priority) > MAX_PRIORITY:
        raise InvalidJobError(f"priority {priority} is outside ±{MAX_PRIORITY}")
    return priority


RESERVED_KEY_PREFIX = "due:"


def validate_key(key: Any) -> str | None:
    """A key (or None), checked: InvalidJobError says what is wrong with it."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise InvalidJobError(f"key must be a non-empty string, got {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidJobError(
            f"key {key[:20]!r}... is {len(key)} characters; the limit is {MAX_KEY_LENGTH} "
            "(hash long keys)"
        )
    if key.startswith(RESERVED_KEY_PREFIX):
        raise InvalidJobError(
            f"key {key!r} starts with {RESERVED_KEY_PREFIX!r}, which due keeps for its own "
            "jobs (a parent's completion job); choose another prefix"
        )
    if not key.isascii() or "\x00" in key:  # most keys, checked without a call
        problem = unstorable(key)  # SQLite kept a NUL, PostgreSQL refused it
        if problem is not None:
            raise InvalidJobError(f"key {key!r} holds {problem}")
    return key


def _validate_delay(delay: DurationLike | None, task: str) -> float:
    """A delay in seconds, at most a century.

    A job due more than a century ahead (durations.MAX_SECONDS) is a mistake
    in the delay; past the year 9999 it could not even be read back.
    """
    return 0.0 if delay is None else _seconds(delay, f"enqueue of {task!r}: delay")


def _validate_unique_for(unique_for: DurationLike, task: str) -> float:
    """A key's window after success, in seconds, bounded like the delay.

    The end of the key's window (its job's end plus this) is computed by every
    enqueue with the key and by every prune.
    """
    return _seconds(unique_for, f"enqueue of {task!r}: unique_for")


def _seconds(value: DurationLike, what: str) -> float:
    try:
        return to_seconds(value, what=what)
    except ConfigurationError as error:
        raise InvalidJobError(str(error)) from None


def _validate_run_at(run_at: datetime | None, task: str) -> datetime | None:
    if run_at is None:
        return None
    if not isinstance(run_at, datetime):
        raise InvalidJobError(f"enqueue of {task!r}: run_at must be a datetime, got {run_at!r}")
    if run_at.tzinfo is None or run_at.utcoffset() is None:
        raise InvalidJobError(
            f"enqueue of {task!r}: run_at={run_at.isoformat()} has no time zone; "
            "pass an aware datetime (e.g. tzinfo=datetime.UTC)"
        )
    try:
        year = run_at.astimezone(UTC).year
    except OverflowError:
        year = LAST_RUN_AT_YEAR + 1
    if year > LAST_RUN_AT_YEAR:
        raise InvalidJobError(
            f"enqueue of {task!r}: run_at={run_at.isoformat()} is after the year "
            f"{LAST_RUN_AT_YEAR} in UTC; give a due time that Python can still read back"
        )
    return run_at
