"""A job's arguments as due shows them: with secrets hidden (invariant 16).

Arguments are stored as given, for the handler; everything due *shows* of
them — `due show`, `due jobs --json`, the dashboard, an error message — goes
through `shown_arguments` (or `hidden`) first, which replaces the value of
every redacted name with `HIDDEN`.

A name is redacted when it is in `DEFAULT_REDACT` (unless the showing app
was made with `redact_defaults=False`), in `App(redact=...)` or in
`@app.task(redact=...)`. It matches, case-insensitively and exactly, a
parameter's name (its whole value is hidden, given by keyword or by
position) and a key of a dict inside any argument, at any depth (dicts in
lists too).

The process that shows a job may not have its task's code (a dashboard, the
command line): so the enqueue stores with the job, in its payload beside
"args" and "kwargs", under `STORED_KEY`, what that process cannot know: the
task's and the app's own names (beyond the defaults) and the positions of
redacted positional arguments (`["card_number", 1]`: strings are names,
integers positions). A job needing neither stores nothing, so the payload of
most jobs is as it was; no column is added; the readers of a payload take
"args" and "kwargs" only (like "headers": due.instrumentation).
"""

from __future__ import annotations

import html
import inspect
import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus

from due.errors import ConfigurationError

if TYPE_CHECKING:
    from due.app import App
    from due.core.jobs import Job

HIDDEN = "•••"
"""What a redacted value is shown as."""

DEFAULT_REDACT = frozenset({"password", "secret", "token", "api_key", "authorization"})
"""Names redacted everywhere unless an app is made with `redact_defaults=False`."""

STORED_KEY = "redact"
"""The payload's key for what a job's arguments are shown without."""

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def redact_names(names: Any, what: str) -> frozenset[str]:
    """The names given to `redact=`, checked and lower-cased.

    Raises:
        ConfigurationError: `names` is not a list of non-empty strings.
    """
    if names is None:
        return frozenset()
    if isinstance(names, str | bytes) or not isinstance(names, Iterable):
        raise ConfigurationError(
            f'{what}: redact= takes a list of argument names (redact=["password"]), '
            f"got {names!r:.60}"
        )
    listed = list(names)
    for name in listed:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"{what}: redact= takes argument names as non-empty strings, got {name!r:.60}"
            )
    return frozenset(name.lower() for name in listed)


def redacted_positions(signature: inspect.Signature, names: Collection[str]) -> tuple[int, ...]:
    """The positions of the parameters named in `names` (lower-case) that may be
    given by position."""
    positional = [p for p in signature.parameters.values() if p.kind in _POSITIONAL]
    return tuple(n for n, p in enumerate(positional) if p.name.lower() in names)


def stored_redaction(
    names: Collection[str], positions: Sequence[int], given: int
) -> list[str | int] | None:
    """What to store with a job given `given` positional arguments: its names
    beyond the defaults and the positions it was given, or None when neither."""
    stored: list[str | int] = sorted(set(names) - DEFAULT_REDACT)
    stored += [position for position in positions if position < given]
    return stored or None


def read_stored(value: Any) -> tuple[str | int, ...]:
    """A payload's `STORED_KEY` entry, as a Job keeps it (nothing when unreadable)."""
    if not isinstance(value, list):
        return ()
    return tuple(
        item.lower() if isinstance(item, str) else item
        for item in value
        if isinstance(item, str) or (type(item) is int and item >= 0)
    )


def shown_arguments(job: Job, app: App | None = None) -> tuple[list[Any], dict[str, Any]]:
    """`job`'s positional and keyword arguments as due shows them.

    Hidden: what the job stored (`Job.redact`), the showing app's names
    (with the defaults unless it turned them off; the defaults when no app
    is given) and, when the job's task is registered with `app`, its names
    and the positions of its parameters.

    Args:
        job: The job, as read from the store.
        app: The app that shows it.

    Returns:
        The positional arguments (a list) and the keyword arguments (a dict),
        copies with every redacted value replaced by `HIDDEN`.
    """
    names = set(DEFAULT_REDACT if app is None else app.redact)
    positions: set[int] = set()
    names.update(item for item in job.redact if isinstance(item, str))
    positions.update(item for item in job.redact if isinstance(item, int))
    if app is not None and job.task in app.tasks:
        task = app.tasks.get(job.task)
        names |= task.redact
        positions.update(task.redacted_positions)
    args = [
        HIDDEN if position in positions else _shown(value, names)
        for position, value in enumerate(job.args)
    ]
    kwargs = {
        key: HIDDEN if key.lower() in names else _shown(value, names)
        for key, value in job.kwargs.items()
    }
    return args, kwargs


def _shown(value: Any, names: Collection[str]) -> Any:
    """`hidden(value, names)`, or `HIDDEN` for a value nested too deeply to walk
    (a store keeps JSON deeper than Python's recursion limit lets this copy)."""
    try:
        return hidden(value, names)
    except RecursionError:
        return HIDDEN


def hidden(value: Any, names: Collection[str]) -> Any:
    """`value` with the value of every key in `names` (lower-case), at any depth,
    replaced by `HIDDEN` (a copy; `value` is left as it is)."""
    if isinstance(value, Mapping):
        return {
            key: HIDDEN if isinstance(key, str) and key.lower() in names else hidden(item, names)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [hidden(item, names) for item in value]
    return value


MIN_SCRUBBED_LENGTH = 4
"""Shorter redacted values are not looked for in error text: "1" or "no"
would hide half of every message, and say little of a secret."""


def scrubbed(text: str, secrets: Collection[str]) -> str:
    """`text` (an error message, a traceback) with each of `secrets` replaced by
    `HIDDEN`, longest first: as written, and in the forms a message may
    quote it in (`encoded_forms`)."""
    if not secrets or not text:
        return text
    forms = {form for secret in secrets for form in encoded_forms(secret)}
    found = [form for form in forms if form in text]
    if not found:
        return text
    pattern = "|".join(map(re.escape, sorted(found, key=len, reverse=True)))
    return re.sub(pattern, HIDDEN, text)


def encoded_forms(secret: str) -> set[str]:
    """`secret` as written, and as a message may quote it: percent-encoded (in
    a URL or a form, with upper- or lower-case hex), escaped by `repr` (of
    the text, or of its UTF-8 bytes), by JSON (`\\uXXXX` or not) and by HTML.
    The quotes around a repr or a JSON string stay outside (`'•••'`)."""
    forms = {
        secret,
        quote(secret, safe="", errors="surrogatepass"),
        quote(secret, errors="surrogatepass"),
        quote_plus(secret, safe="", errors="surrogatepass"),
        quote_plus(secret, errors="surrogatepass"),
        repr(secret)[1:-1],
        repr(secret.encode("utf-8", "surrogatepass"))[2:-1],
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        html.escape(secret),
        html.escape(secret, quote=False),
    }
    forms |= {_PERCENT.sub(lambda hex: hex[0].lower(), form) for form in forms if "%" in form}
    return forms


_PERCENT = re.compile(r"%[0-9A-F]{2}")


def secret_texts(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    names: Collection[str],
    positions: Collection[int],
    min_length: int = MIN_SCRUBBED_LENGTH,
) -> set[str]:
    """The text of every value `shown_arguments` hides of these arguments (given
    the names and positions it hides), to be scrubbed from error text (those
    of `min_length` characters or more).

    A walk with a stack of its own, not a recursion: arguments nested as
    deep as a store keeps must not fail the attempt's record."""
    found: set[str] = set()
    # (value, whether it is hidden whole)
    stack: list[tuple[Any, bool]] = [(v, n in positions) for n, v in enumerate(args)]
    stack += [(v, k.lower() in names) for k, v in kwargs.items()]
    while stack:
        value, whole = stack.pop()
        if isinstance(value, Mapping):
            stack += [
                (item, whole or (isinstance(key, str) and key.lower() in names))
                for key, item in value.items()
            ]
        elif isinstance(value, list | tuple):
            stack += [(item, whole) for item in value]
        elif whole and value is not None and not isinstance(value, bool):
            text = str(value)
            if len(text) >= min_length:
                found.add(text)
    return found
