"""The only module that reads the time.

`due` compares due times, leases and rescues with one clock: the database's
(invariant 5). A `Clock` therefore answers `now()` with either a concrete
instant or `None`, which means "let the database decide": PostgreSQL queries
fall back to `now()`, and SQLite — a single host by definition — to this
host's clock through `wall()`.

Tests and users' tests pass a `FakeClock` instead and move time with
`advance()`, so nothing ever sleeps to make time pass.

A worker waits for the database's times on its own: `DatabaseClock` keeps its
estimate of the database's clock on the monotonic one, so that no wait
depends on a reading of this host's wall clock, which steps (invariant 13).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from due.durations import DurationLike, to_seconds


class Clock(Protocol):
    """Where `due` takes the time from: give one to `App(clock=...)`.

    `SystemClock` is the default; `FakeClock` moves only when a test says so.
    Any object with these three methods will do.
    """

    def now(self) -> datetime | None:
        """The instant to use, or None to use the database's clock.

        Returns:
            An aware datetime, or None: "let the database decide".
        """

    def wall(self) -> datetime:
        """A concrete instant, for decisions made on this host and for SQLite.

        Returns:
            An aware datetime in UTC.
        """

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for local deadlines).

        Returns:
            Seconds from an arbitrary start.
        """


class SystemClock:
    """Production clock: the database's `now()`; the host's for SQLite."""

    def now(self) -> datetime | None:
        """None: the database's clock decides (SQLite's is this host's).

        Returns:
            None.
        """
        return None

    def wall(self) -> datetime:
        """This host's clock.

        Returns:
            The current time, aware, in UTC.
        """
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """This host's monotonic clock (`time.monotonic`).

        Returns:
            Seconds from an arbitrary start.
        """
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to, for tests. Thread-safe.

    `monotonic()` advances together with `now()`, so deadlines computed on it
    expire when a test advances the clock. Give it to the app, and the store,
    the worker's loops and `due.testing.drain` all read it instead of the
    database's clock:

    >>> clock = FakeClock("2030-01-01T09:00:00+00:00")
    >>> clock.advance("90m")
    datetime.datetime(2030, 1, 1, 10, 30, tzinfo=datetime.timezone.utc)

    Args:
        start: The first instant: an aware datetime, or the same as ISO 8601
            text. Default: 2030-01-01 00:00 UTC.

    Raises:
        ValueError: `start` has no time zone (or is text that is not ISO 8601).
    """

    def __init__(self, start: datetime | str | None = None) -> None:
        if start is None:
            start = datetime(2030, 1, 1, tzinfo=UTC)
        elif isinstance(start, str):
            start = datetime.fromisoformat(start)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime (add tzinfo=UTC)")
        self._now = start.astimezone(UTC)
        self._monotonic = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The fake time, which the store uses instead of the database's.

        Returns:
            The current fake instant, aware, in UTC.
        """
        with self._lock:
            return self._now

    def wall(self) -> datetime:
        """The same as `now()`.

        Returns:
            The current fake instant, aware, in UTC.
        """
        return self.now()

    def monotonic(self) -> float:
        """A monotonic clock that moves forward with `advance` and `set`.

        Returns:
            Seconds from an arbitrary start.
        """
        with self._lock:
            return self._monotonic

    def advance(self, by: DurationLike) -> datetime:
        """Move forward by a duration.

        Args:
            by: How far: "90s", "1h30m", a number of seconds, a timedelta.

        Returns:
            The new current instant.

        Raises:
            ConfigurationError: `by` is negative (use `set` to go back), or not a
                duration.
        """
        seconds = to_seconds(by, what="FakeClock.advance")
        if seconds < 0:
            raise ValueError("FakeClock.advance cannot move backwards; use set()")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._monotonic += seconds
            return self._now

    def set(self, when: datetime) -> None:
        """Jump to an instant, forwards or backwards (wall clocks do jump).

        The monotonic clock moves forward by the jump, or not at all for a
        jump backwards.

        Args:
            when: The new current instant, an aware datetime.

        Raises:
            ValueError: `when` has no time zone.
        """
        if when.tzinfo is None:
            raise ValueError("FakeClock.set needs an aware datetime")
        with self._lock:
            delta = (when - self._now).total_seconds()
            self._now = when.astimezone(UTC)
            self._monotonic += max(delta, 0.0)


STEP_SECONDS = 1.0
"""A clock that moved this much more (or less) than the monotonic clock between
two readings has stepped (`ClockStep`): slewing by NTP moves a clock
milliseconds a minute, never a second between two readings seconds apart."""
MAX_UNCERTAINTY_SECONDS = 0.25
"""A reading of the database's clock whose round trip took longer than twice this
is too vague to replace a better one (a slow or frozen connection)..."""
STALE_SECONDS = 60.0
"""...unless the last reading kept is older than this."""


@dataclass(frozen=True, slots=True)
class ClockReading:
    """The database's time as measured at a monotonic instant.

    The instant is the middle of the round trip that read it; `wall` is this
    host's wall clock at that instant.
    """

    database: datetime
    monotonic: float
    wall: datetime
    uncertainty: float
    """Half the round trip: the reading is this close to the truth."""


@dataclass(frozen=True, slots=True)
class ClockStep:
    """Two readings whose clocks did not move as the monotonic clock did.

    This host's wall clock, or the database's, stepped (seconds, positive
    forward).
    """

    host: float
    database: float
    offset: float
    """The database's clock minus this host's wall clock, now."""


class DatabaseClock:
    """This process's estimate of the database's clock, kept on the monotonic clock.

    A loop that waits for a time the database gave it (a job's `run_at`, a
    schedule's next fire) needs the database's clock here, without a round trip
    each time. It is estimated as the last reading plus the monotonic time
    since, so a step of this host's wall clock (NTP, a VM resumed) changes
    nothing; readings taken again every few seconds (`observe`) follow a step
    of the database's own clock (and, on SQLite, of this host's, which is the
    database's) and the drift between the two. A test's clock that gives its
    own `now()` is the database's clock already (the store uses it too).
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._last: ClockReading | None = None

    @property
    def last(self) -> ClockReading | None:
        """The reading kept, if any."""
        return self._last

    def now(self) -> datetime:
        """The database's time now, as estimated from the last reading."""
        given = self._clock.now()
        if given is not None:
            return given
        last = self._last
        if last is None:  # not measured yet: this host's clock is the best guess
            return self._clock.wall()
        return last.database + timedelta(seconds=self._clock.monotonic() - last.monotonic)

    def observe(self, database: datetime, sent_at: float, received_at: float) -> ClockStep | None:
        """Take a reading of the database's clock, read between two monotonic instants.

        Returns:
            The step it shows, if any.
        """
        monotonic = self._clock.monotonic()
        middle = (sent_at + received_at) / 2
        wall = self._clock.wall() - timedelta(seconds=monotonic - middle)
        reading = ClockReading(database, middle, wall, max(received_at - sent_at, 0.0) / 2)
        last = self._last
        if last is not None and not _better(reading, last):
            return None
        self._last = reading
        return None if last is None else _step(last, reading)


def _better(reading: ClockReading, last: ClockReading) -> bool:
    """Whether a reading should replace the last one kept."""
    if reading.uncertainty <= max(last.uncertainty, MAX_UNCERTAINTY_SECONDS):
        return True
    return reading.monotonic - last.monotonic >= STALE_SECONDS


def _step(before: ClockReading, after: ClockReading) -> ClockStep | None:
    elapsed = after.monotonic - before.monotonic
    host = (after.wall - before.wall).total_seconds() - elapsed
    database = (after.database - before.database).total_seconds() - elapsed
    vague = before.uncertainty + after.uncertainty
    if abs(host) <= STEP_SECONDS and abs(database) <= STEP_SECONDS + vague:
        return None
    return ClockStep(host, database, (after.database - after.wall).total_seconds())
