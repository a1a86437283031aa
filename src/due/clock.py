"""The only module that reads the time.

`due` compares due times, leases and rescues with one clock: the database's
(invariant 5). A `Clock` therefore answers `now()` with either a concrete
instant or `None`, which means "let the database decide": PostgreSQL queries
fall back to `now()`, and SQLite — a single host by definition — to this
host's clock through `wall()`.

Tests and users' tests pass a `FakeClock` instead and move time with
`advance()`, so nothing ever sleeps to make time pass.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

from due.durations import DurationLike, to_seconds


class Clock(Protocol):
    def now(self) -> datetime | None:
        """The instant to use, or None to use the database's clock."""

    def wall(self) -> datetime:
        """A concrete instant (UTC), for host-side decisions and SQLite."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for local deadlines)."""


class SystemClock:
    """Production clock: the database's `now()`; the host's for SQLite."""

    def now(self) -> datetime | None:
        return None

    def wall(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to. Thread-safe.

    `monotonic()` advances together with `now()`, so deadlines computed on it
    expire when a test advances the clock.
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
        with self._lock:
            return self._now

    def wall(self) -> datetime:
        return self.now()

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def advance(self, by: DurationLike) -> datetime:
        """Move forward by a duration ("90s", 1.5, timedelta); returns the new now."""
        seconds = to_seconds(by, what="FakeClock.advance")
        if seconds < 0:
            raise ValueError("FakeClock.advance cannot move backwards; use set()")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._monotonic += seconds
            return self._now

    def set(self, when: datetime) -> None:
        """Jump to an instant (forwards or backwards: wall clocks do jump)."""
        if when.tzinfo is None:
            raise ValueError("FakeClock.set needs an aware datetime")
        with self._lock:
            delta = (when - self._now).total_seconds()
            self._now = when.astimezone(UTC)
            self._monotonic += max(delta, 0.0)
