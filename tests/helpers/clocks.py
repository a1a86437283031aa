"""Clocks for tests that step: this host's clocks, with a wall clock a test moves."""

from __future__ import annotations

from datetime import datetime, timedelta

from due.clock import SystemClock


class SteppedClock:
    """This host's clocks, whose wall clock a test can step (an NTP step, a VM
    resumed) while the monotonic clock runs on. `now()` is None, so the database's
    own clock decides: PostgreSQL's `now()`, which no step here moves, or for
    SQLite this stepped wall clock (the host's clock is SQLite's)."""

    def __init__(self) -> None:
        self._system = SystemClock()
        self.step = timedelta(0)

    def now(self) -> datetime | None:
        return None

    def wall(self) -> datetime:
        return self._system.wall() + self.step

    def monotonic(self) -> float:
        return self._system.monotonic()


class FakeHostClock:
    """This host's clocks, faked: they move only when a test says, the wall clock
    alone when it steps. `now()` is None, so a worker given this clock waits on
    its estimate of the database's clock, which is the store's (a `FakeClock` the
    test moves apart from this one, as a database's clock is apart from a host's)."""

    def __init__(self, wall: datetime) -> None:
        self._wall = wall
        self._monotonic = 1000.0

    def now(self) -> datetime | None:
        return None

    def wall(self) -> datetime:
        return self._wall

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Time passes: both clocks move."""
        self._wall += timedelta(seconds=seconds)
        self._monotonic += seconds

    def step(self, seconds: float) -> None:
        """The wall clock steps (an NTP step, a VM resumed); the monotonic one does not."""
        self._wall += timedelta(seconds=seconds)
