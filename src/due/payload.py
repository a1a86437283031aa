"""Values stored as JSON — arguments, results, checkpoints, progress, errors — with
errors that name the culprit.

What is stored must read back the same on both stores: no NaN or infinity
(not JSON), and no NUL character (PostgreSQL's jsonb cannot hold \\u0000; on
SQLite it would cut C strings short). A value that breaks these rules is
refused where it is produced, for its own job only, never discovered later
in a batch statement that other jobs share.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from due.errors import PayloadError
from due.shown_arguments import STORED_KEY

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_ERROR_CHARACTERS = 10_000

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _not_encodable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_encoder = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(
        None, _not_encodable, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)
"""`_encoder`'s C encoder made once, without the check for circular values.
`JSONEncoder.encode` makes a new one, with a new dict of the values it is in,
at every call: half the time of encoding a job's arguments (1.9 against
3.4 us), paid by every enqueue of a bulk. Its circular check needs a dict of
its own per call (one shared between calls keeps the marks of a call that
failed half way, and later takes other values for circular ones), so a
circular value is met as a RecursionError instead, and handed to `_encoder`
to be named."""


def _json_text(value: Any) -> str:
    """`_encoder.encode(value)`: TypeError or ValueError for what JSON cannot hold."""
    if _c_encoder is None:
        return _encoder.encode(value)
    try:
        return "".join(_c_encoder(value, 0))
    except RecursionError:
        return _encoder.encode(value)  # ValueError if circular; too deep: RecursionError


# \u0000 in encoded JSON, unless its backslash is itself escaped ("\\u0000" is text).
_ENCODED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _holds_nul(text: str) -> bool:
    # The substring test (30 ns) spares almost every text the search (1.5 us):
    # a third of the time a bulk enqueue spent preparing each job.
    return "\\u0000" in text and _ENCODED_NUL.search(text) is not None


SURROGATE = (
    "Python's stand-in for a byte that is not UTF-8, as in file names and argv), "
    "which cannot be stored; decode such bytes with errors='replace', or pass them as base64"
)
TOO_DEEP = (
    "nested too deeply to store (lists or dicts about a thousand levels deep, past "
    "Python's recursion limit); flatten them"
)


def unstorable(text: str) -> str | None:
    """What keeps `text` from being stored as text on both stores (a NUL
    character, a lone surrogate), or None: free for ASCII text without a NUL."""
    if "\x00" in text:
        return "a NUL character (\\x00)"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"a lone surrogate ({text[error.start]!r}: {SURROGATE}"
    return None


def _surrogate(value: Any) -> str | None:
    problem = unstorable(_json_text(value))
    return None if problem is None else f"holds {problem}"


def _too_deep(value: Any) -> str | None:
    try:
        _json_text(value)
    except RecursionError:
        return f"is {TOO_DEEP}"
    return None


def _culprit(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any], problem: Callable[[Any], str | None]
) -> PayloadError:
    """The argument (or keyword name) with `problem`, named."""
    named = [(f"argument {n}", value) for n, value in enumerate(args)]
    named += [(f"keyword name {name!r}", name) for name in kwargs]
    named += [(f"argument {name!r}", value) for name, value in kwargs.items()]
    found = next(((what, p) for what, value in named if (p := problem(value))), None)
    if found is None:  # only the arguments together: a level deeper than each
        return PayloadError(f"arguments of task {task!r} are {TOO_DEEP}")
    return PayloadError(f"{found[0]} of task {task!r} {found[1]}")


def encode_arguments(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int
) -> str:
    """The JSON text stored for a job's arguments; raises PayloadError."""
    try:
        text = _json_text({"args": args, "kwargs": kwargs})
    except (TypeError, ValueError) as error:
        raise _explain_unserialisable(task, args, kwargs) from error
    except RecursionError:
        raise _culprit(task, args, kwargs, _too_deep) from None
    if _holds_nul(text):
        raise PayloadError(
            f"arguments of task {task!r} hold a NUL character (\\x00), which the job "
            "store cannot keep; remove it (or encode binary data, e.g. as base64)"
        )
    if text.isascii():
        size = len(text)
    else:  # the size in UTF-8, which text with a lone surrogate has not: ASCII is spared
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise _culprit(task, args, kwargs, _surrogate) from None
    if size > max_bytes:
        raise PayloadError(
            f"arguments of task {task!r} are {_human_bytes(size)} as JSON, over the limit of "
            f"{_human_bytes(max_bytes)}; store large data elsewhere and pass a reference "
            "(or raise App(max_payload_bytes=...))"
        )
    return text


def with_headers(payload: str, headers: Mapping[str, str] | None) -> str:
    """A job's payload (JSON text of an object) with `headers` beside its
    arguments, under "headers" (due.instrumentation); the same when there are
    none, or when one cannot be stored (a NUL, a lone surrogate)."""
    if not headers:
        return payload
    text = _json_text(dict(headers))
    if _holds_nul(text) or unstorable(text) is not None:
        return payload
    return _with_entry(payload, "headers", text)


def with_redaction(payload: str, redact: list[str | int] | None) -> str:
    """A job's payload with what its arguments are shown without beside them,
    under "redact" (due.shown_arguments); the same when there is nothing."""
    if not redact:
        return payload
    return _with_entry(payload, STORED_KEY, _json_text(redact))


def _with_entry(payload: str, key: str, text: str) -> str:
    body = payload.rstrip()[:-1].rstrip()  # the object without its closing brace
    return f'{body}{"" if body.endswith("{") else ","}"{key}":{text}}}'


def encode_value(value: Any, what: str) -> str:
    """JSON text of a result, checkpoint or progress; raises PayloadError naming `what`."""
    try:
        text = _json_text(value)
    except (TypeError, ValueError) as error:
        raise PayloadError(f"{what} is not JSON-serialisable: {error}") from error
    except RecursionError as error:
        raise PayloadError(
            f"{what} is nested too deeply to be stored as JSON; flatten it"
        ) from error
    if _holds_nul(text):
        raise PayloadError(f"{what} holds a NUL character (\\x00), which cannot be stored")
    if not text.isascii() and _holds_surrogate(text):
        raise PayloadError(
            f"{what} holds a lone surrogate (text decoded with errors='surrogateescape', "
            "as Python does for file names that are not UTF-8), which cannot be stored; "
            "decode the bytes properly, or pass them as base64"
        )
    return text


def finite_number(value: Any, what: str) -> int | float:
    """`value` as a plain int or float (a Decimal, a Fraction or a numpy number is
    converted); PayloadError naming `what` when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        raise PayloadError(f"{what} must be a number, got {type(value).__name__} {value!r:.40}")
    number: int | float = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not math.isfinite(number):
        raise PayloadError(f"{what} must be a finite number, got {value!r}")
    return number


def storable_text(text: str, limit: int = MAX_ERROR_CHARACTERS) -> str:
    """Text for the job's record (an error message, a traceback, a warning, a
    progress message): NUL characters shown as \\x00, lone surrogates as
    \\udcxx (neither store can hold them), and at most `limit` characters (the
    end, where it matters, is kept)."""
    text = text.replace("\x00", "\\x00")
    if not text.isascii() and _holds_surrogate(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _holds_surrogate(text: str) -> bool:
    """Whether `text` holds a lone surrogate, which UTF-8 cannot encode: how Python
    decodes bytes that are not UTF-8 in file names, argv and the environment
    (surrogateescape). No driver can send it; the batch carrying it would fail."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _explain_unserialisable(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> PayloadError:
    for position, value in enumerate(args):
        problem = _problem(value)
        if problem:
            return PayloadError(
                f"argument {position} of task {task!r} is not JSON-serialisable: {problem}; "
                "pass plain data (str, int, float, bool, None, list, dict)"
            )
    for name, value in kwargs.items():
        if not isinstance(name, str):
            return PayloadError(f"keyword names of task {task!r} must be strings, got {name!r}")
        problem = _problem(value)
        if problem:
            return PayloadError(
                f"argument {name!r} of task {task!r} is not JSON-serialisable: {problem}; "
                "pass plain data (str, int, float, bool, None, list, dict)"
            )
    return PayloadError(f"arguments of task {task!r} are not JSON-serialisable")


def _problem(value: Any) -> str | None:
    try:
        _encoder.encode(value)
    except (TypeError, ValueError) as error:
        return str(error)
    return None


def _human_bytes(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MiB"
    if size >= 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size} bytes"
