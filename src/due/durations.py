"""Durations as people write them: "90s", "15m", "1h30m", "1h 30m", "1.5h", "2 days",
a number of seconds, or a timedelta.

Every duration `due` takes goes through `to_seconds`, so every setting reads
the same spellings and refuses a negative, unreadable or overlong value with
the same message, whatever type it came in.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from due.errors import ConfigurationError

DurationLike = str | int | float | timedelta

_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_SPELLINGS = {
    "ms": ("ms", "msec", "msecs", "millisecond", "milliseconds"),
    "s": ("s", "sec", "secs", "second", "seconds"),
    "m": ("m", "min", "mins", "minute", "minutes"),
    "h": ("h", "hr", "hrs", "hour", "hours"),
    "d": ("d", "day", "days"),
    "w": ("w", "week", "weeks"),
}
_UNIT_OF = {spelling: unit for unit, spellings in _SPELLINGS.items() for spelling in spellings}
# Longest spellings first, so "ms" is not read as "m" followed by garbage.
_UNIT_PATTERN = "|".join(sorted(_UNIT_OF, key=len, reverse=True))
_PART = re.compile(rf"\s*(\d+(?:\.\d*)?|\.\d+)\s*({_UNIT_PATTERN})(?![a-z])")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")
EXAMPLES = "'500ms', '90s', '15m', '1h30m', '1h 30m', '1.5h', '2d' or a number of seconds"
MAX_SECONDS = 100 * 366 * 86_400
"""The longest duration due takes, for every setting (a delay, a key's
`unique_for`, a lease, a retention...): a century. Longer is a mistake of unit
(milliseconds given as seconds, say), and the times due computes from it (a
due time, the end of a key's window, a pruning cut-off) must stay within what
Python's datetime (up to the year 9999) and PostgreSQL's timestamps hold:
beyond them a statement that meets the row fails, for every job it touches."""
MAX_TEXT = "100 years"


def to_seconds(value: DurationLike, *, what: str = "duration", bounded: bool = True) -> float:
    """Seconds in `value`; raises ConfigurationError naming `what` when it is
    unreadable, not finite, negative, or (when `bounded`) longer than MAX_SECONDS."""
    seconds = _seconds(value, what)
    if not math.isfinite(seconds):
        raise ConfigurationError(f"{what}: {value!r} is not a finite duration; write {EXAMPLES}")
    if seconds < 0:
        raise ConfigurationError(
            f"{what} cannot be negative (got {describe(seconds)}); give zero or more"
        )
    if bounded and seconds > MAX_SECONDS:
        raise ConfigurationError(
            f"{what} of {value!r} is more than {MAX_TEXT}, the longest duration due takes; "
            "durations are in seconds (or write it like '90d')"
        )
    return seconds


def describe(seconds: float) -> str:
    """A duration in the shortest exact spelling: 5400 → '1h30m', -5 → '-5s'."""
    if seconds < 0:
        return "-" + describe(-seconds)
    parts = []
    remaining = seconds
    for unit in ("d", "h", "m"):
        size = _UNITS[unit]
        if remaining >= size:
            count = math.floor(remaining / size)
            parts.append(f"{count}{unit}")
            remaining -= count * size
    if remaining or not parts:
        parts.append(f"{remaining:g}s")
    return "".join(parts)


def _seconds(value: DurationLike, what: str) -> float:
    if isinstance(value, bool):
        raise ConfigurationError(f"{what}: expected a duration like {EXAMPLES}, got {value!r}")
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _parse(value, what)
    raise ConfigurationError(
        f"{what}: expected a duration like {EXAMPLES}, got {type(value).__name__}"
    )


def _parse(text: str, what: str) -> float:
    stripped = text.strip().lower()
    if _NUMBER.fullmatch(stripped):
        return float(stripped)
    sign, body = (-1.0, stripped[1:]) if stripped.startswith("-") else (1.0, stripped)
    position, total = 0, 0.0
    for match in _PART.finditer(body):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[_UNIT_OF[match.group(2)]]
        position = match.end()
    if not body or position != len(body) or position == 0:
        raise ConfigurationError(
            f"{what}: cannot read {text!r} as a duration; write it like {EXAMPLES}"
        )
    return sign * total
