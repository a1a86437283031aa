"""When a schedule fires: cron expressions and intervals, as pure functions of time.

Cron expressions are read in the schedule's time zone, on the wall clock:
"0 2 * * *" in Europe/Paris is 02:00 Paris time, winter and summer. Daylight
saving time has two awkward days a year, with a defined answer for each:

- A wall-clock time that does not exist (spring forward: 02:30 when clocks
  jump from 02:00 to 03:00) fires once, at the first instant after the gap
  (03:00 new time). Several such times collapse into that one firing.
- A wall-clock time that happens twice (fall back: 01:30 when clocks go from
  02:00 back to 01:00) fires once, at its first occurrence.

Intervals (`every="90s"`) are durations, unaffected by time zones: firings
fall on multiples of the period since the Unix epoch, so every process and
every restart computes the same grid.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, croniter

from due.durations import DurationLike, to_seconds
from due.errors import ConfigurationError

MIN_INTERVAL_SECONDS = 1.0
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
FIVE_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
SIX_FIELDS = ("second", *FIVE_FIELDS)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def zone(name: str) -> ZoneInfo:
    """The time zone named `name`, or a ConfigurationError saying so."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"unknown time zone {name!r}; use an IANA name like 'UTC', 'Europe/Paris' "
            "or 'America/New_York'"
        ) from None


def check_cron(expression: str) -> str:
    """The expression, normalised; a ConfigurationError naming the bad field otherwise."""
    if not isinstance(expression, str) or not expression.strip():
        raise ConfigurationError(f"cron expression must be a non-empty string, got {expression!r}")
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise ConfigurationError(
                f"cron macro {text!r} is not known; use one of {', '.join(MACROS)}"
            )
        return text.lower()
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise ConfigurationError(
            f"cron expression {text!r} has {len(fields)} fields; write 5 (minute hour "
            "day-of-month month day-of-week) or 6 (a seconds field first)"
        )
    names = FIVE_FIELDS if len(fields) == 5 else SIX_FIELDS
    for position, (name, value) in enumerate(zip(names, fields, strict=True)):
        alone = ["*"] * len(fields)
        alone[position] = value
        problem = _cron_problem(" ".join(alone))
        if problem:
            raise ConfigurationError(
                f"cron expression {text!r}: the {name} field {value!r} is invalid ({problem})"
            )
    problem = _cron_problem(text)
    if problem:
        raise ConfigurationError(f"cron expression {text!r} is invalid ({problem})")
    return text


def _cron_problem(text: str) -> str | None:
    try:
        _iterator(text, datetime(2000, 1, 1))  # noqa: DTZ001 - wall time: naive on purpose
    except (CroniterBadCronError, ValueError, KeyError) as error:
        return str(error) or type(error).__name__
    return None


def _iterator(text: str, start: datetime) -> croniter:
    return croniter(text, start, second_at_beginning=len(text.split(" ")) == 6)


def check_interval(every: DurationLike) -> float:
    seconds = to_seconds(every, what="schedule interval (every=)")
    if seconds < MIN_INTERVAL_SECONDS:
        raise ConfigurationError(
            f"schedule interval of {seconds:g}s is too short; the minimum is "
            f"{MIN_INTERVAL_SECONDS:g}s"
        )
    return seconds


@dataclass(frozen=True)
class Timing:
    """A cron expression in a time zone, or an interval in seconds."""

    cron: str | None
    every: float | None
    tz: str = "UTC"

    def after(self, instant: datetime) -> datetime:
        """The first firing strictly after `instant`."""
        return next(self.firings_after(instant))

    def firings_after(self, instant: datetime) -> Iterator[datetime]:
        """Firings strictly after `instant`, in order, as aware UTC datetimes."""
        if self.every is not None:
            return _interval_firings(self.every, instant)
        assert self.cron is not None
        return _cron_firings(self.cron, zone(self.tz), instant)

    def describe(self) -> str:
        if self.every is not None:
            return f"every {self.every:g}s"
        return f"{self.cron} ({self.tz})"


def _interval_firings(period: float, instant: datetime) -> Iterator[datetime]:
    elapsed = (instant - _EPOCH).total_seconds()
    step = math.floor(elapsed / period) + 1
    while True:
        yield _EPOCH + timedelta(seconds=step * period)
        step += 1


def _cron_firings(text: str, tz: ZoneInfo, instant: datetime) -> Iterator[datetime]:
    # Walk wall-clock times in the zone; map each to one instant (DST rules above).
    local = instant.astimezone(tz).replace(tzinfo=None)
    # Start an hour back: a time in a gap maps forward, possibly past `instant`.
    walker = _iterator(text, local - timedelta(hours=3))
    last: datetime | None = None
    while True:
        wall = walker.get_next(datetime)
        fired = wall_to_instant(wall, tz)
        if fired <= instant or fired == last:
            continue
        last = fired
        yield fired


def wall_to_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant a wall-clock time names: first occurrence; after the gap if skipped."""
    first = wall.replace(tzinfo=tz, fold=0)
    utc = first.astimezone(UTC)
    if utc.astimezone(tz).replace(tzinfo=None) == wall:
        return utc  # exists (once, or twice: fold=0 is the first occurrence)
    return _end_of_gap(wall, tz)


def _end_of_gap(wall: datetime, tz: ZoneInfo) -> datetime:
    """The first instant after the gap that swallowed `wall` (a spring-forward)."""
    low = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)  # before the transition
    high = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)  # after it
    after = high.astimezone(tz).utcoffset()
    while (high - low) > timedelta(seconds=1):
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle.astimezone(tz).utcoffset() == after:
            high = middle
        else:
            low = middle
    return high
