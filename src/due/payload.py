"""Job arguments as JSON: encoded once at enqueue, with errors that name the culprit."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from due.errors import PayloadError

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_arguments(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int
) -> str:
    """The JSON text stored for a job's arguments; raises PayloadError."""
    try:
        text = _encoder.encode({"args": args, "kwargs": kwargs})
    except (TypeError, ValueError) as error:
        raise _explain_unserialisable(task, args, kwargs) from error
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > max_bytes:
        raise PayloadError(
            f"arguments of task {task!r} are {_human_bytes(size)} as JSON, over the limit of "
            f"{_human_bytes(max_bytes)}; store large data elsewhere and pass a reference "
            "(or raise App(max_payload_bytes=...))"
        )
    return text


def decode_arguments(
    text: str | bytes | Mapping[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    data = json.loads(text) if isinstance(text, str | bytes) else text
    return tuple(data.get("args", ())), dict(data.get("kwargs", {}))


def encode_value(value: Any, what: str) -> str:
    """JSON text of a result or checkpoint; raises PayloadError naming `what`."""
    try:
        return _encoder.encode(value)
    except (TypeError, ValueError) as error:
        raise PayloadError(f"{what} is not JSON-serialisable: {error}") from error


def decode_value(text: str | bytes | None) -> Any:
    return None if text is None else json.loads(text)


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
