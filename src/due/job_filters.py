"""The filter that selects jobs, as `app.jobs`, `app.retry_many` and
`app.cancel_many` take it (and `due jobs`, `due retry`, `due cancel`): checked
once and put in one `JobFilter`, so that a bulk action acts on exactly the
jobs the same filter lists.

`since` and `until` bound a job's time: when it ended (succeeded, failed or
cancelled), or when it was created if it has not ended. So "failed since
10:02" means failed at 10:02 or later, and "queued for longer than an hour"
is `state="queued", until="1h"`. Either is a moment (an aware datetime, or
ISO 8601 text with its offset) or a duration before now ("30m": the last
half hour).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from due import lookups
from due.core.jobs import JobState
from due.core.records import JobFilter
from due.durations import DurationLike, to_seconds
from due.errors import ConfigurationError
from due.shown_arguments import hidden
from due.task import closest_task

if TYPE_CHECKING:
    from due.app import App

Moment = datetime | DurationLike
"""A time a filter starts or ends at: a datetime with its time zone, ISO 8601
text with its offset, or a duration before now ("30m", seconds, a timedelta)."""


def build(
    now: Callable[[], datetime],
    *,
    queue: str | None = None,
    state: JobState | None = None,
    task: str | None = None,
    parent: Any = None,
    key: str | None = None,
    key_prefix: str | None = None,
    since: Moment | None = None,
    until: Moment | None = None,
    error_contains: str | None = None,
    workflow: Any = None,
    args_contains: Any = None,
    stuck: bool = False,
    before: Any = None,
    limit: Any = 100,
) -> JobFilter:
    """The JobFilter these options make; ConfigurationError naming the option
    that cannot be read. `now` is asked only for a duration."""
    return JobFilter(
        queue=queue,
        state=state,
        task=task,
        limit=lookups.list_limit(limit),
        parent=lookups.id_filter(parent, "parent"),
        stuck_only=bool(stuck),
        key=key,
        before=lookups.id_filter(before, "before"),
        since=moment(since, now, "since"),
        until=moment(until, now, "until"),
        error_contains=error_contains,
        key_prefix=key_prefix,
        workflow=lookups.id_filter(workflow, "workflow"),
        args_contains=json_object(args_contains),
    )


def can_match(where: JobFilter) -> bool:
    """Whether any stored job could match (no stored text holds a NUL)."""
    texts = (
        where.queue,
        where.task,
        where.key,
        where.key_prefix,
        where.error_contains,
        where.args_contains,
    )
    return lookups.can_match(*texts)


def unknown_task(app: App, task: str | None) -> str | None:
    """Why a filter's `task` matches no job when no task of that name is known:
    none of the app's, and none a schedule, a worker or a stored job names;
    with the closest names. None when the name is known, or none is given.

    A filter that matches nothing answers with an empty list or a count of 0,
    which for a misspelt name (`send_welcom`, or `send_welcome` without its
    module) looks like an answer: `due jobs`, `due retry`, `due cancel` and
    the dashboard ask this when theirs matched nothing. (The database is read
    only then, and its jobs only when the schedules and workers do not name it.)
    """
    if task is None or task in app.tasks:
        return None
    readable = lookups.can_match(task)  # (a NUL: no stored name holds one)
    if readable and app.store.task_in_use(task):
        return None
    known = sorted(set(app.tasks.names()) | set(app.store.task_names() if readable else ()))
    where = (
        "not a task of this app, nor named by a schedule, worker or job in the database"
        if len(app.tasks)
        else "no schedule, worker or job in the database names it"
    )
    message = f"no task named {task!r} is known ({where})"
    close = closest_task(task, known)
    if close:
        return f"{message}; {close}"
    if known:
        more = ", ..." if len(known) > 10 else ""
        return f"{message}; known tasks: {', '.join(known[:10])}{more}"
    return f"{message}; none is known yet"


def json_object(value: Any) -> str | None:
    """`args_contains` as compact JSON text: a mapping, or JSON text of an object."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as error:  # RecursionError: nested too deeply
            raise ConfigurationError(
                f"args_contains: {value!r:.60} is not JSON ({error}); give an object, "
                "like '{\"customer_id\": 42}'"
            ) from None
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"args_contains must be a JSON object, like '{{\"customer_id\": 42}}'; "
            f"got {type(value).__name__}"
        )
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise ConfigurationError(f"args_contains cannot be written as JSON: {error}") from None


def hidden_key(where: JobFilter, hidden_names: Collection[str]) -> str | None:
    """The first key of `where.args_contains`, at any depth, that is one of
    `hidden_names` (lower-case), or None.

    A search may not name one: due shows such a value as `•••`, and a search
    by it would tell whoever may search (the command line, the dashboard)
    whether a guessed secret is the stored one.
    """
    if where.args_contains is None or not hidden_names:
        return None
    stack: list[Any] = [json.loads(where.args_contains)]
    while stack:  # (a stack of its own: JSON may nest deeper than recursion goes)
        value = stack.pop()
        if isinstance(value, list):
            stack += value
        elif isinstance(value, dict):
            for key, item in value.items():
                if key.lower() in hidden_names:
                    return str(key)
                stack.append(item)
    return None


def hiding(where: JobFilter, positions: Mapping[str, Sequence[int]]) -> JobFilter:
    """`where`, its `args_contains` not looking into the positional arguments
    at `positions` (by task), which are shown hidden (as are those each job
    stored)."""
    hidden = {task: list(at) for task, at in positions.items() if at}
    text = json.dumps(hidden, ensure_ascii=False, separators=(",", ":")) if hidden else None
    return replace(where, hidden_positions=text)


def moment(value: Moment | None, now: Callable[[], datetime], what: str) -> datetime | None:
    """The instant `value` names: itself, or that long before now."""
    if value is None or isinstance(value, datetime):
        if value is not None and value.utcoffset() is None:
            raise ConfigurationError(
                f"{what}={value.isoformat()} has no time zone; give an aware datetime "
                "(with its tzinfo), ISO 8601 text with its offset, or a duration before now ('30m')"
            )
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            parsed = None
        if parsed is not None:
            return moment(parsed, now, what)
    if not isinstance(value, str):
        return now() - timedelta(seconds=to_seconds(value, what=what))
    try:
        seconds = to_seconds(value, what=what)
    except ConfigurationError:
        raise ConfigurationError(
            f"{what}: {value!r:.40} is neither a duration before now ('30m', '2h', '1d') "
            "nor a time with its offset ('2026-12-05T10:02:00+00:00')"
        ) from None
    return now() - timedelta(seconds=seconds)


def describe(where: JobFilter, hide: Collection[str] = ()) -> str:
    """The filter as the history shows it: `task=charge_card state=failed ...`,
    the values of `hide`'s keys in `args_contains` shown as `•••`."""
    terms = {
        "task": where.task,
        "queue": where.queue,
        "state": where.state.value if where.state else None,
        "since": where.since.isoformat() if where.since else None,
        "until": where.until.isoformat() if where.until else None,
        "error_contains": where.error_contains,
        "key": where.key,
        "key_prefix": where.key_prefix,
        "parent": where.parent,
        "workflow": where.workflow,
        "args_contains": _without_secrets(where.args_contains, hide),
    }
    given = [f"{name}={_text(value)}" for name, value in terms.items() if value is not None]
    return " ".join(given) or "every job"


def _without_secrets(args_contains: str | None, hide: Collection[str]) -> str | None:
    if args_contains is None or not hide:
        return args_contains
    shown = hidden(json.loads(args_contains), hide)
    return json.dumps(shown, ensure_ascii=False, separators=(",", ":"))  # as json_object


def _text(value: object) -> str:
    text = str(value)
    return text if text and not any(c.isspace() or c in "'\"=" for c in text) else repr(text)
