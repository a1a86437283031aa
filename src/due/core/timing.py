"""When a schedule fires: cron expressions and intervals, as pure functions of time.

Cron expressions are read in the schedule's time zone, on the wall clock:
"0 2 * * *" in Europe/Paris is 02:00 Paris time, winter and summer. Daylight
saving time has two awkward days a year; the answer follows cron(8), and
depends on whether the expression names particular times of day:

- An expression with `*` in its minute or hour field (`*/15 * * * *`,
  `0 * * * *`, `@hourly`, `*/10 2 * * *`) runs on the wall clock as it is:
  in a repeated hour (fall back) it fires at each real occurrence, so an
  every-15-minutes job keeps firing every 15 minutes; in a skipped hour
  (spring forward) it does not fire, as that hour's times never happen.
- An expression for particular times (no `*` in minute or hour: `30 2 * * *`,
  `0,30 1-3 * * *`, `@daily`) runs each of its times once a day. A time that
  does not exist (spring forward: 02:30 when clocks jump from 02:00 to 03:00)
  fires once, at the first instant after the gap (03:00 new time); several
  such times collapse into that one firing. A time that happens twice (fall
  back: 01:30 when clocks go from 02:00 back to 01:00) fires once, at its
  first occurrence.

Intervals (`every="90s"`) are durations, unaffected by time zones: firings
fall on multiples of the period since the Unix epoch, so every process and
every restart computes the same grid.

A schedule must fire within HORIZON_YEARS: a cron expression with no time in
them (February 30th) and a longer interval are refused where they are defined,
and a definition found in the database that cannot fire (written by hand, or by
a version of `due` that did not check) is reported by `timing_problem` instead
of raising deep inside the scheduler.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from due.durations import DurationLike, to_seconds
from due.errors import ConfigurationError

MIN_INTERVAL_SECONDS = 1.0
HORIZON_YEARS = 10
"""A schedule must fire within this many years of now: longer is a mistake (a
date that does not exist, an interval given in milliseconds). Every leap-day
expression passes: its longest wait, across 2100, is eight years."""
HORIZON = timedelta(days=366 * HORIZON_YEARS)
MAX_INTERVAL_SECONDS = HORIZON.total_seconds()
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
    seconds = to_seconds(every, what="interval (every=)")
    problem = _interval_problem(seconds)
    if problem:
        raise ConfigurationError(problem)
    return seconds


def _interval_problem(seconds: float) -> str | None:
    if seconds < MIN_INTERVAL_SECONDS:
        return f"interval of {seconds:g}s is too short; the minimum is {MIN_INTERVAL_SECONDS:g}s"
    if seconds > MAX_INTERVAL_SECONDS:
        return (
            f"interval of {seconds:g}s is more than {HORIZON_YEARS} years, the longest a "
            "schedule may wait (was it given in milliseconds?)"
        )
    return None


def timing_problem(timing: Timing, now: datetime) -> str | None:
    """Why `timing` cannot fire within HORIZON_YEARS after `now`, in words; None
    when it can. Never raises: a definition read from the database may hold
    anything (a cron text that does not parse, an unknown zone, a zero interval)."""
    if timing.every is not None:
        every = timing.every
        if (
            isinstance(every, bool)
            or not isinstance(every, int | float)
            or not math.isfinite(every)
        ):
            return f"its interval {timing.every!r} is not a number of seconds"
        problem = _interval_problem(float(every))
        if problem:
            return f"its {problem}"
    try:
        first = timing.after(now)
    except CroniterBadDateError:
        return (
            f"its cron expression {timing.cron!r} never fires (no such date: is that day "
            "in that month?)"
        )
    except Exception as error:  # whatever a bad stored definition makes the walk raise
        return f"its next time cannot be computed ({_reason(error)})"
    if first - now > HORIZON:
        return (
            f"its next time, {first:%Y-%m-%d}, is more than {HORIZON_YEARS} years away; a "
            f"schedule must fire within {HORIZON_YEARS} years"
        )
    return None


def _reason(error: Exception) -> str:
    text = str(error)
    return (
        text
        if isinstance(error, ConfigurationError) and text
        else f"{type(error).__name__}: {text}"
    )


@dataclass(frozen=True)
class Timing:
    """A cron expression in a time zone, or an interval in seconds."""

    cron: str | None
    """The cron expression (None for an interval)."""
    every: float | None
    """The interval, in seconds (None for a cron expression)."""
    tz: str = "UTC"
    """The time zone the cron expression is read in."""

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
        """The timing in a few words: `every 3600s`, or `0 2 * * * (Europe/Paris)`."""
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
    # Walk wall-clock times in the zone; map each to its instants (DST rules above).
    local = instant.astimezone(tz).replace(tzinfo=None)
    # Start three hours back: a time in a gap maps forward, possibly past `instant`.
    walker = _iterator(text, local - timedelta(hours=3))
    instants = _wall_clock_instants if on_the_wall_clock(text) else _particular_time_instants
    last: datetime | None = None
    later: list[datetime] = []  # second occurrences, due after earlier walls' first ones
    while True:
        wall = walker.get_next(datetime)
        first, second = instants(wall, tz)
        for moment in (first, second):
            if moment is not None:
                heapq.heappush(later, moment)
        # Every wall time still to come maps at or after `first` (fold 0 is monotonic).
        while later and first is not None and later[0] <= first:
            fired = heapq.heappop(later)
            if fired > instant and fired != last:
                last = fired
                yield fired


def on_the_wall_clock(text: str) -> bool:
    """Whether the expression runs on the wall clock as it is (a `*` in its minute
    or hour field), rather than at particular times of day (see the module doc)."""
    if text.startswith("@"):
        return text == "@hourly"
    fields = text.split(" ")
    minute, hour = (fields[0], fields[1]) if len(fields) == 5 else (fields[1], fields[2])
    return "*" in minute or "*" in hour


Instants = tuple[datetime | None, datetime | None]
"""When a wall-clock time fires: (first, second), either of them None."""


def _wall_clock_instants(wall: datetime, tz: ZoneInfo) -> Instants:
    """Every instant the wall clock shows `wall`: none (a gap), one, or two (a fold)."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) != wall:
        return None, None
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    return first, (None if second == first else second)


def _particular_time_instants(wall: datetime, tz: ZoneInfo) -> Instants:
    return wall_to_instant(wall, tz), None


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
