"""Tasks: registered functions, their options, and the registry of names."""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from due.core.jobs import Job
from due.durations import DurationLike, to_seconds
from due.errors import ArgumentsError, ConfigurationError, InvalidJobError, UnknownTaskError
from due.limits import LimitUse
from due.long_work.context import Context
from due.payload import unstorable
from due.request import (
    OPTION_NAMES,
    EnqueueOptions,
    JobRequest,
    validate_priority,
    validate_queue,
)
from due.retry import Retry
from due.shown_arguments import (
    DEFAULT_REDACT,
    redact_names,
    redacted_positions,
    stored_redaction,
)

if TYPE_CHECKING:
    from due.app import App

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"
MIN_LEASE_SECONDS = 2.0


@dataclass(frozen=True)
class TaskConfig:
    """A task's own settings, given to @app.task(...) and validated there."""

    queue: str = DEFAULT_QUEUE
    """The queue its jobs go to."""
    priority: int = 0
    """Higher runs first within a queue."""
    retry: Retry = field(default_factory=Retry)
    """How its failures are retried."""
    timeout: float | None = None
    """Seconds an attempt may run before it is ended as failed."""
    lease: float | None = None
    """Lease length for this task's jobs; the worker's default when None."""
    unique_for: float | None = None
    """After success, a job's key keeps deduplicating for this many seconds."""
    stuck_after: float | None = None
    """A running job whose progress has not moved for this long is flagged stuck."""
    check: Callable[[Any], str | None] | None = None
    """Looks at a successful result and returns a problem with it, or None.

    A job whose result has a problem ends `succeeded` with that warning, and is
    counted and alerted as `warned`.
    """
    limits: tuple[LimitUse, ...] = ()
    """The limits its jobs count against (checked by the App that declares them)."""
    redact: frozenset[str] = frozenset()
    """Names of arguments (and keys in dict arguments) shown as "•••", lower-case."""

    @classmethod
    def build(
        cls,
        *,
        task: str,
        queue: str,
        priority: int,
        retry: Retry | None,
        timeout: DurationLike | None,
        lease: DurationLike | None,
        unique_for: DurationLike | None,
        stuck_after: DurationLike | None = None,
        check: Callable[[Any], str | None] | None = None,
        redact: Iterable[str] | None = None,
    ) -> TaskConfig:
        """The settings of `@app.task(...)`, checked.

        Raises:
            ConfigurationError: Says which setting is wrong and why.
        """
        _check_name(task)
        try:
            queue = validate_queue(queue)
            priority = validate_priority(priority)
        except InvalidJobError as error:
            raise ConfigurationError(f"task {task!r}: {error}") from None
        if retry is not None and not isinstance(retry, Retry):
            raise ConfigurationError(f"task {task!r}: retry= takes due.Retry(...), got {retry!r}")
        lease_seconds = _positive(lease, f"task {task!r}: lease")
        if lease_seconds is not None and lease_seconds < MIN_LEASE_SECONDS:
            raise ConfigurationError(
                f"task {task!r}: lease of {lease_seconds}s is too short; "
                f"the minimum is {MIN_LEASE_SECONDS:g}s"
            )
        return cls(
            queue=queue,
            priority=priority,
            retry=retry or Retry(),
            timeout=_positive(timeout, f"task {task!r}: timeout"),
            lease=lease_seconds,
            unique_for=_positive(unique_for, f"task {task!r}: unique_for"),
            stuck_after=_positive(stuck_after, f"task {task!r}: stuck_after"),
            check=_check(check, task),
            redact=redact_names(redact, f"task {task!r}"),
        )


def _check_name(task: Any) -> None:
    if not isinstance(task, str) or not task:
        raise ConfigurationError(f"a task name must be a non-empty string, got {task!r}")
    if (problem := unstorable(task)) is not None:  # SQLite kept a NUL, PostgreSQL refused it
        raise ConfigurationError(f"task name {task!r} holds {problem}")


def _check(
    check: Callable[[Any], str | None] | None, task: str
) -> Callable[[Any], str | None] | None:
    if check is not None and not callable(check):
        raise ConfigurationError(
            f"task {task!r}: check= takes a function of the result that returns a problem "
            f"text or None, got {check!r}"
        )
    return check


def _positive(value: DurationLike | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = to_seconds(value, what=what)
    if seconds <= 0:
        raise ConfigurationError(f"{what} must be positive, got {value!r}")
    return seconds


ENQUEUE_OPTIONS = (*OPTION_NAMES, "connection")
"""What `task.options(...)` takes: never confused with the task's own parameters."""


class Task(Generic[P, R]):
    """A registered function, as `@app.task` returns it.

    Calling it runs it here and now, like the plain function. `enqueue`,
    `aenqueue` and `request` take exactly the function's arguments (without
    its `due.Context`) and are typed with them, so a type checker refuses a
    wrong call. Enqueue options go through `options(...)`::

        send_reset_email.enqueue(42)
        send_reset_email.options(delay="24h", key="reset:42").enqueue(42)
    """

    def __init__(self, app: App, fn: Callable[..., Any], name: str, config: TaskConfig) -> None:
        self.app = app
        """The app it is registered with."""
        self.fn = fn
        """The function itself."""
        self.name = name
        """Its stored name (`module.qualname` unless `name=` said otherwise)."""
        self.config = config
        """What the task was registered with (queue, priority, retry, timeout, lease...)."""
        self.is_async = inspect.iscoroutinefunction(fn)
        self.context_parameter = find_context_parameter(fn)
        _require_context_first(fn, name, self.context_parameter)
        self._signature = _signature_without(fn, self.context_parameter)
        self._positional_range = _plain_positional_range(self._signature)
        self.redact = config.redact | app.redact
        """The names its arguments are shown without (its own, the app's, the defaults)."""
        self.redacted_positions = redacted_positions(self._signature, self.redact)
        """The positions of its parameters named in `redact`."""
        self.stores_redaction = bool(self.redacted_positions or self.redact - DEFAULT_REDACT)
        """Whether its jobs store what they are shown without (`stored_redaction`)."""
        functools.update_wrapper(self, fn)

    def stored_redaction(self, given: int) -> list[str | int] | None:
        """What a job given `given` positional arguments stores of `redact`, or None.

        Args:
            given: How many positional arguments the job is given.

        Returns:
            Names beyond the defaults and positions (due.shown_arguments), or None.
        """
        return stored_redaction(self.redact, self.redacted_positions, given)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        """Run the function here and now, as if it were not a task (nothing is enqueued)."""
        result: R = self.fn(*args, **kwargs)
        return result

    def __repr__(self) -> str:
        return f"<due.Task {self.name} queue={self.config.queue}>"

    def options(
        self,
        *,
        delay: DurationLike | None = None,
        run_at: datetime | None = None,
        queue: str | None = None,
        priority: int | None = None,
        key: str | None = None,
        unique_for: DurationLike | None = None,
        limit_keys: Mapping[str, str] | None = None,
        connection: Any = None,
    ) -> TaskWithOptions[P, R]:
        """This task with enqueue options, for one call (or several).

        Nothing is checked until a job is enqueued (or a request is sent)::

            send_reset_email.options(delay="24h", key="reset:42").enqueue(42)

        Args:
            delay: Due after this long: "90s", "1h30m", seconds, a timedelta (at
                most 100 years).
            run_at: Due at this aware datetime (not with `delay`).
            queue: Instead of the task's queue.
            priority: Instead of the task's priority.
            key: Deduplicate: while a job with this key is queued, running or
                waiting, enqueue returns it (`job.deduplicated`).
            unique_for: With `key`, how long the key keeps deduplicating after
                success, instead of the task's.
            limit_keys: The key of a limit of the task, by the limit's name
                (`{"account-sync": "acct-7"}`), instead of its key function's.
            connection: Your own open connection: psycopg's or sqlite3's, or
                SQLAlchemy's Connection or Session (with `aenqueue`: psycopg's
                AsyncConnection, or SQLAlchemy's AsyncConnection or
                AsyncSession). The job is written in your transaction.

        Returns:
            The task with these options.
        """
        return TaskWithOptions(
            self,
            EnqueueOptions(
                delay=delay,
                run_at=run_at,
                queue=queue,
                priority=priority,
                key=key,
                unique_for=unique_for,
                limit_keys=limit_keys,
            ),
            connection,
        )

    def request(self, *args: P.args, **kwargs: P.kwargs) -> JobRequest:
        """A job to enqueue later, e.g. in a batch with `app.enqueue_many`.

        Args:
            *args: The function's positional arguments.
            **kwargs: The function's keyword arguments.

        Returns:
            The request (checked when it is enqueued).
        """
        return JobRequest(self.name, args, kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Store a job for this task; returns once it is committed.

        Args:
            *args: The function's positional arguments.
            **kwargs: The function's keyword arguments.

        Returns:
            The job as stored (or the active job with the same key).

        Raises:
            ArgumentsError: The arguments do not fit the function.
            PayloadError: The arguments cannot be stored as JSON, or are too large.
            InvalidJobError: An enqueue option is invalid.
            StoreError: The database failed (nothing was written).
        """
        return self.app.enqueue_many([JobRequest(self.name, args, kwargs)])[0]

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """`enqueue` for async code.

        Args:
            *args: The function's positional arguments.
            **kwargs: The function's keyword arguments.

        Returns:
            The job as stored.

        Raises:
            ArgumentsError: The arguments do not fit the function.
            PayloadError: The arguments cannot be stored as JSON, or are too large.
            StoreError: The database failed (nothing was written).
        """
        return (await self.app.aenqueue_many([JobRequest(self.name, args, kwargs)]))[0]

    def call_arguments(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], context: Context
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The job's arguments with the context put first."""
        if self.context_parameter is None:
            return args, kwargs
        return (context, *args), kwargs

    def canonical_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """The arguments as one text, however they were spelled.

        Bound to the signature, defaults applied, names sorted: what identifies
        a piece.
        """
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return json.dumps(bound.arguments, sort_keys=True, separators=(",", ":"))

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise ArgumentsError unless the function accepts these arguments."""
        fast = self._positional_range
        if fast is not None and not kwargs and fast[0] <= len(args) <= fast[1]:
            return  # the common case, without the cost of Signature.bind
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as error:
            raise ArgumentsError(
                f"arguments do not fit task {self.name!r}{self._signature}: {error}"
                + self._unexpected_hint(kwargs, str(error))
                + self._options_hint(kwargs)
            ) from None

    def _unexpected_hint(self, kwargs: Mapping[str, Any], error: str) -> str:
        """Keyword names the function does not take, each with the closest one it does.

        `bind` names only its first complaint (a missing `user_id`, not the
        `user` given in its place).
        """
        parameters = self._signature.parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return ""
        keywords = [p.name for p in parameters if p.kind in _BY_NAME]
        hints = []
        for name in kwargs:
            if not isinstance(name, str) or name in keywords or name in ENQUEUE_OPTIONS:
                continue
            close = did_you_mean(name, keywords)
            if f"unexpected keyword argument {name!r}" not in error:
                hints.append(
                    f"unexpected keyword argument {name!r}" + (f" ({close})" if close else "")
                )
            elif close:
                hints.append(f"for {name!r}, {close}")
        return "".join(f"; {hint}" for hint in hints)

    def _options_hint(self, kwargs: Mapping[str, Any]) -> str:
        misplaced = [
            n for n in kwargs if n in ENQUEUE_OPTIONS and n not in self._signature.parameters
        ]
        if not misplaced:
            return ""
        given = ", ".join(f"{name}=..." for name in misplaced)
        return f"; enqueue options go through task.options({given}).enqueue(...)"


class TaskWithOptions(Generic[P, R]):
    """A task with enqueue options, as `task.options(...)` returns it.

    `enqueue`, `aenqueue` and `request` take the function's own arguments,
    typed, exactly as on the task.
    """

    def __init__(self, task: Task[P, R], options: EnqueueOptions, connection: Any) -> None:
        self.task = task
        """The task."""
        self.enqueue_options = options
        """The options given."""
        self.connection = connection
        """The connection given, if any."""

    def __repr__(self) -> str:
        return f"<due.TaskWithOptions {self.task.name} {self.enqueue_options}>"

    def request(self, *args: P.args, **kwargs: P.kwargs) -> JobRequest:
        """A job to enqueue later with `app.enqueue_many` (which takes `connection=`).

        Args:
            *args: The function's positional arguments.
            **kwargs: The function's keyword arguments.

        Returns:
            The request, with these options (checked when it is enqueued).

        Raises:
            ConfigurationError: The options have a connection: give it to
                `app.enqueue_many` instead.
        """
        if self.connection is not None:
            raise ConfigurationError(
                f"task {self.task.name!r}: a request is enqueued later, by "
                "app.enqueue_many(requests, connection=...); give the connection there"
            )
        return self._request(args, kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Store a job for this task with these options.

        Returns once it is committed (or, on `connection`, once it is written
        in your transaction).

        Args:
            *args: The function's positional arguments.
            **kwargs: The function's keyword arguments.

        Returns:
            The job as stored (or the active job with the same key,
            `job.deduplicated`).

        Raises:
            ArgumentsError: The arguments do not fit the function.
            PayloadError: The arguments cannot be stored as JSON, or are too large.
            InvalidJobError: An option is invalid (both `delay` and `run_at`, a
                naive `run_at`, a bad queue name or key...).
            StoreError: The database failed (nothing was written).
        """
        app = self.task.app
        return app.enqueue_many([self._request(args, kwargs)], connection=self.connection)[0]

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """`enqueue` for async code, on your async connection if given (as `options`).

        Args:
            *args: The function's positional arguments.
            **kwargs: The function's keyword arguments.

        Returns:
            The job as stored.

        Raises:
            ArgumentsError: The arguments do not fit the function.
            PayloadError: The arguments cannot be stored as JSON, or are too large.
            InvalidJobError: An option is invalid.
            StoreError: The database failed (nothing was written).
        """
        app = self.task.app
        requests = [self._request(args, kwargs)]
        return (await app.aenqueue_many(requests, connection=self.connection))[0]

    def _request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> JobRequest:
        return JobRequest(self.task.name, args, kwargs, **self.enqueue_options.options())


def find_context_parameter(fn: Callable[..., Any]) -> str | None:
    """The name of the parameter annotated `due.Context`, if any."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to the raw text
        hints = dict(getattr(fn, "__annotations__", {}))
    for name, hint in hints.items():
        if name != "return" and (hint is Context or hint in ("Context", "due.Context")):
            return name
    return None


def _signature_without(fn: Callable[..., Any], parameter: str | None) -> inspect.Signature:
    signature = inspect.signature(fn)
    if parameter is None:
        return signature
    return signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name != parameter]
    )


def _require_context_first(fn: Callable[..., Any], task: str, parameter: str | None) -> None:
    """Refuse a context that is not the first parameter.

    The context comes first, so a type checker sees enqueue(...) without it
    (`Concatenate[Context, P]`) and the worker knows where to put it.
    """
    if parameter is None:
        return
    first = next(iter(inspect.signature(fn).parameters.values()))
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if first.name != parameter or first.kind not in positional:
        raise ConfigurationError(
            f"task {task!r}: its due.Context parameter {parameter!r} must come first, "
            f"as in (ctx: due.Context, ...), so type checkers see enqueue(...) without it"
        )


def _plain_positional_range(signature: inspect.Signature) -> tuple[int, int] | None:
    """(required, total) positional parameters when no other kind exists, else None."""
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = list(signature.parameters.values())
    if any(p.kind not in plain for p in parameters):
        return None
    required = sum(1 for p in parameters if p.default is inspect.Parameter.empty)
    return required, len(parameters)


class Registry:
    """Task names → tasks, for one app."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task[Any, Any]] = {}

    def add(self, task: Task[Any, Any]) -> None:
        """Register a task; ConfigurationError if its name is another function's."""
        existing = self._tasks.get(task.name)
        if existing is not None and existing.fn is not task.fn:
            raise ConfigurationError(
                f"task name {task.name!r} is already registered by {existing.fn!r}; "
                "give one of them another name=..."
            )
        self._tasks[task.name] = task

    def get(self, name: str) -> Task[Any, Any]:
        """The task of that name; UnknownTaskError (with the closest names) if none."""
        task = self._tasks.get(name)
        if task is None:
            raise UnknownTaskError(_unknown_task_message(name, list(self._tasks)))
        return task

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[Task[Any, Any]]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def names(self) -> list[str]:
        """Every task's name, sorted."""
        return sorted(self._tasks)

    def queues(self) -> list[str]:
        """The queues of the tasks, sorted."""
        return sorted({task.config.queue for task in self._tasks.values()})


_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`did you mean 'x'?` for the closest of `known` to a misspelt `name`, or ""."""
    close = difflib.get_close_matches(name, known, n=1)
    return f"did you mean {close[0]!r}?" if close else ""


def closest_task(name: str, known: Sequence[str]) -> str:
    """`did you mean 'x'?` for a task name, or "".

    The known task that is `name` with its module (`myapp.send_welcome` for
    `send_welcome`; the few, when several are), else the closest by spelling.
    """
    ending = sorted(task for task in known if task.endswith(f".{name}"))
    if len(ending) == 1:
        return f"did you mean {ending[0]!r}?"
    if ending:
        return f"did you mean one of {', '.join(map(repr, ending[:5]))}?"
    return did_you_mean(name, known)


def _unknown_task_message(name: str, known: list[str]) -> str:
    message = f"no task named {name!r} is registered"
    close = closest_task(name, known)
    if close:
        return f"{message}; {close}"
    if not known:
        return f"{message} (this app has no tasks yet: decorate functions with @app.task)"
    return f"{message}; known tasks: {', '.join(sorted(known)[:10])}"
