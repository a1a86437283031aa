"""The worker's estimate of the database's clock: kept on the monotonic clock, so a
step of this host's wall clock does not move it; measured again, so a step of the
database's clock is followed; every step said."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from due.clock import STALE_SECONDS, ClockStep, DatabaseClock, FakeClock
from tests.helpers.clocks import FakeHostClock

HOST = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
HOUR = 3600.0


class Database:
    """A database's clock, 7 s ahead of the host's wall clock at first; it runs
    with the host's monotonic clock, and steps when a test says."""

    def __init__(self, host: FakeHostClock) -> None:
        self._host = host
        self._start = host.monotonic()
        self._at_start = HOST + timedelta(seconds=7)

    def now(self) -> datetime:
        return self._at_start + timedelta(seconds=self._host.monotonic() - self._start)

    def step(self, seconds: float) -> None:
        self._at_start += timedelta(seconds=seconds)


def read(
    estimate: DatabaseClock, host: FakeHostClock, database: Database, round_trip: float = 0.002
) -> ClockStep | None:
    """A reading of the database's clock, which answers in the middle of the round trip."""
    sent_at = host.monotonic()
    host.advance(round_trip / 2)
    answer = database.now()
    host.advance(round_trip / 2)
    return estimate.observe(answer, sent_at, host.monotonic())


@pytest.fixture
def host() -> FakeHostClock:
    return FakeHostClock(HOST)


@pytest.fixture
def database(host: FakeHostClock) -> Database:
    return Database(host)


@pytest.fixture
def estimate(host: FakeHostClock, database: Database) -> DatabaseClock:
    measured = DatabaseClock(host)
    assert read(measured, host, database) is None
    return measured


def test_the_estimate_moves_with_the_monotonic_clock_not_the_wall_clock(
    host: FakeHostClock, database: Database, estimate: DatabaseClock
) -> None:
    host.advance(10)
    assert estimate.now() == database.now()
    host.step(HOUR)  # an NTP step, a VM resumed
    assert estimate.now() == database.now()
    host.step(-2 * HOUR)
    host.advance(3)
    assert estimate.now() == database.now()


def test_a_step_of_this_hosts_wall_clock_is_said_at_the_next_reading(
    host: FakeHostClock, database: Database, estimate: DatabaseClock
) -> None:
    host.advance(5)
    assert read(estimate, host, database) is None
    host.step(HOUR)
    host.advance(5)
    step = read(estimate, host, database)
    assert step is not None
    assert step.host == pytest.approx(HOUR)
    assert step.database == pytest.approx(0, abs=0.01)
    assert step.offset == pytest.approx(7 - HOUR)
    assert estimate.now() == database.now()


def test_a_step_of_the_databases_clock_is_followed_and_said(
    host: FakeHostClock, database: Database, estimate: DatabaseClock
) -> None:
    host.advance(5)
    database.step(-HOUR)
    assert estimate.now() == database.now() + timedelta(hours=1)  # not measured yet
    step = read(estimate, host, database)
    assert step is not None
    assert step.database == pytest.approx(-HOUR)
    assert step.host == pytest.approx(0, abs=0.01)
    host.advance(1)
    assert estimate.now() == database.now()


def test_a_reading_over_a_slow_round_trip_does_not_replace_a_good_one_until_stale(
    host: FakeHostClock, database: Database, estimate: DatabaseClock
) -> None:
    host.advance(5)
    # The database answered at once, then the reply took 4 s (a frozen TCP path):
    # taken as the middle of the round trip, it would be 2 s behind. Kept: the old one.
    sent_at = host.monotonic()
    answer = database.now()
    host.advance(4)
    assert estimate.observe(answer, sent_at, host.monotonic()) is None
    assert estimate.now() == database.now()
    host.advance(STALE_SECONDS)
    sent_at = host.monotonic()
    answer = database.now()
    host.advance(4)
    assert estimate.observe(answer, sent_at, host.monotonic()) is None  # within its uncertainty
    assert (
        estimate.last is not None and estimate.last.uncertainty == 2.0
    )  # taken: the last is stale


def test_before_any_reading_the_estimate_is_this_hosts_clock(host: FakeHostClock) -> None:
    assert DatabaseClock(host).now() == HOST


def test_a_clock_that_gives_its_own_now_is_the_databases_clock() -> None:
    """A FakeClock's now() is what the store uses too (tests): no estimate at all."""
    clock = FakeClock(HOST)
    estimate = DatabaseClock(clock)
    estimate.observe(HOST - timedelta(hours=5), clock.monotonic(), clock.monotonic())
    clock.advance(3)
    assert estimate.now() == HOST + timedelta(seconds=3)
