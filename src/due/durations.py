"""Durations as people write them: "90s", "15m", "1h30m", "2d", 1.5, timedelta."""

from __future__ import annotations

import re
from datetime import timedelta

from due.errors import ConfigurationError

DurationLike = str | int | float | timedelta

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def to_seconds(value: DurationLike, *, what: str = "duration") -> float:
    """Seconds in `value`; raises ConfigurationError naming `what` when unreadable."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{what}: expected a duration, got {value!r}")
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _parse(value.strip().lower(), what)
    raise ConfigurationError(
        f"{what}: expected a duration like '30s', '15m', '1h30m' or a number of seconds, "
        f"got {type(value).__name__}"
    )


def _parse(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    position, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ConfigurationError(
            f"{what}: cannot read {text!r} as a duration; "
            "write it like '500ms', '30s', '15m', '1h30m', '2d' or a number of seconds"
        )
    return total
