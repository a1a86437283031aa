"""The limits an App declares, and what a task's `limits=` makes of a call.

`app.limit("stripe", rate="100/s")` declares a limit; `@app.task(limits=...)`
names the limits its jobs count against, each for the whole limit or per key
(a function of the task's arguments, called as the task would be). The keys
are computed at enqueue and stored on the job; the numbers are stored in the
database (workers write the code's as they start, `due limit set` overrides
them), so every worker on every host enforces the same ones.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from due.core.limits import MAX_KEY_LENGTH, WHOLE, Limit, build, encode_job_limits, hidden_key
from due.errors import ConfigurationError, InvalidJobError
from due.shown_arguments import HIDDEN, MIN_SCRUBBED_LENGTH, scrubbed

KeyFunction = Callable[..., Any]
LimitsOption = Sequence[str] | Mapping[str, KeyFunction | None]
"""What `@app.task(limits=...)` takes: names (the whole limit each), or a
mapping of name to a key function of the task's arguments (None: the whole
limit)."""


@dataclass(frozen=True, slots=True)
class LimitUse:
    """One limit a task's jobs count against (what `task.limits` holds)."""

    name: str
    """The limit's name."""
    key: KeyFunction | None = None
    """A function of the task's arguments giving the key (the limit applies per
    key), or None (every job counts against the whole limit)."""


class LimitCatalog:
    """The limits an App declares, by name."""

    def __init__(self) -> None:
        self._limits: dict[str, Limit] = {}

    def __iter__(self) -> Iterator[Limit]:
        return iter(self._limits.values())

    def __len__(self) -> int:
        return len(self._limits)

    def __contains__(self, name: object) -> bool:
        return name in self._limits

    def get(self, name: str) -> Limit | None:
        return self._limits.get(name)

    def declare(self, name: Any, *, rate: Any = None, concurrency: Any = None) -> Limit:
        limit = build(name, rate=rate, concurrency=concurrency)
        known = self._limits.get(limit.name)
        if known is not None and known != limit:
            raise ConfigurationError(
                f"limit {limit.name!r} is declared twice with other numbers "
                f"({known.describe()}, then {limit.describe()}); declare it once"
            )
        self._limits[limit.name] = limit
        return limit

    def uses(self, task: str, option: Any) -> tuple[LimitUse, ...]:
        """A task's `limits=`, checked: every name declared, every key callable."""
        if option is None:
            return ()
        if isinstance(option, str):
            option = [option]
        if isinstance(option, Mapping):
            pairs = list(option.items())
        elif isinstance(option, Sequence) and not isinstance(option, bytes | bytearray):
            pairs = [(name, None) for name in option]
        else:
            raise ConfigurationError(
                f"task {task!r}: limits= takes a list of limit names or a mapping of name to "
                f"a key function of the task's arguments, got {type(option).__name__}"
            )
        uses = []
        for name, key in pairs:
            if not isinstance(name, str):
                raise ConfigurationError(
                    f"task {task!r}: limits= takes limit names (strings), got {name!r}"
                )
            if name not in self._limits:
                declared = ", ".join(sorted(self._limits)) or "none"
                raise ConfigurationError(
                    f"task {task!r}: limits= names {name!r}, which this app does not declare "
                    f"(declared: {declared}); call app.limit({name!r}, rate=... or "
                    "concurrency=...) before the task"
                )
            if key is not None and not callable(key):
                raise ConfigurationError(
                    f"task {task!r}: the key of limit {name!r} must be a function of the "
                    f"task's arguments (lambda account_id: str(account_id)), got {key!r}"
                )
            uses.append(LimitUse(name, key))
        if len({use.name for use in uses}) != len(uses):
            raise ConfigurationError(f"task {task!r}: limits= names a limit twice")
        return tuple(uses)


def job_limits(
    task: str,
    uses: Sequence[LimitUse],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    given: Mapping[str, Any] | None,
    secrets: Collection[str] = (),
) -> str | None:
    """The limits a job counts against, as stored: each key given by
    `limit_keys=`, else computed by the task's key function, else the whole
    limit. A key made from a redacted argument (one of `secrets`, the text of
    each value the job's arguments show hidden) is stored marked, and shown
    as `•••` (core.limits.hidden_key). InvalidJobError names what to fix,
    without those values."""
    if given is not None and not isinstance(given, Mapping):
        raise InvalidJobError(
            f"enqueue of {task!r}: limit_keys= takes a mapping of limit name to key "
            f"({{'account-sync': 'acct-7'}}), got {type(given).__name__}"
        )
    given = dict(given or {})
    unknown = sorted(set(given) - {use.name for use in uses})
    if unknown:
        named = ", ".join(use.name for use in uses) or "none"
        raise InvalidJobError(
            f"enqueue of {task!r}: limit_keys= names {unknown[0]!r}, not a limit of this task "
            f"(its limits: {named})"
        )
    pairs = []
    for use in uses:
        if use.name in given:
            key = _checked_key(task, use.name, given[use.name], "limit_keys=", secrets)
        elif use.key is not None:
            try:
                value = use.key(*args, **kwargs)
            except Exception as error:
                said = f"{type(error).__name__}: {error}"
                shown = scrubbed(said, _looked_for(secrets))
                raise InvalidJobError(
                    f"enqueue of {task!r}: the key function of limit {use.name!r} raised "
                    f"{shown}; it is called with the task's arguments"
                ) from (error if shown == said else None)  # its text holds a secret
            key = _checked_key(task, use.name, value, "its key function", secrets)
        else:
            key = WHOLE
        pairs.append((use.name, key if key == WHOLE else hidden_key(key, secrets)))
    return encode_job_limits(pairs)


def _looked_for(secrets: Collection[str]) -> list[str]:
    """The secrets long enough to look for in a message (as in an error's text)."""
    return [secret for secret in secrets if len(secret) >= MIN_SCRUBBED_LENGTH]


def _checked_key(task: str, limit: str, value: Any, source: str, secrets: Collection[str]) -> str:
    if not isinstance(value, str) or not value:
        shown = HIDDEN if str(value) in secrets else scrubbed(repr(value), _looked_for(secrets))
        raise InvalidJobError(
            f"enqueue of {task!r}: {source} gave the key of limit {limit!r} as {shown}; "
            "a key is a non-empty string (str(account_id), say)"
        )
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidJobError(
            f"enqueue of {task!r}: the key of limit {limit!r} is {len(value)} characters; "
            f"at most {MAX_KEY_LENGTH}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJobError(
            f"enqueue of {task!r}: the key of limit {limit!r} holds a character that "
            "cannot be stored (a lone surrogate); decode it properly first"
        ) from None
    if "\x00" in value:
        raise InvalidJobError(
            f"enqueue of {task!r}: the key of limit {limit!r} holds a NUL character "
            "(\\x00), which neither database stores in a text; remove it"
        )
    return value
