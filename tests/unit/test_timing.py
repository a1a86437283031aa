"""Firing times as pure functions of time, daylight saving included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

import pytest

from due.core.timing import Timing, check_cron, check_interval, zone
from due.errors import ConfigurationError


def firings(cron: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    return list(takewhile(lambda t: t < end, Timing(cron, None, tz).firings_after(start)))


def local(moments: list[datetime], tz: str) -> list[str]:
    return [m.astimezone(ZoneInfo(tz)).strftime("%H:%M%z") for m in moments]


def day(tz: str, y: int, m: int, d: int) -> tuple[datetime, datetime]:
    start = datetime(y, m, d, tzinfo=ZoneInfo(tz))
    end = datetime(y, m, d, tzinfo=ZoneInfo(tz)) + timedelta(days=1)
    return start.astimezone(UTC) - timedelta(microseconds=1), end.astimezone(UTC)


def test_a_daily_time_fires_once_each_day_in_its_zone() -> None:
    start = datetime(2026, 1, 10, tzinfo=UTC)
    times = list(islice(Timing("0 2 * * *", None, "Europe/Paris").firings_after(start), 3))
    assert [t.isoformat() for t in times] == [
        "2026-01-10T01:00:00+00:00",
        "2026-01-11T01:00:00+00:00",
        "2026-01-12T01:00:00+00:00",
    ]


@pytest.mark.parametrize(
    ("tz", "date", "hourly_count", "skipped_wall"),
    [
        ("Europe/Paris", (2026, 3, 29), 23, "02:00"),  # 02:00 -> 03:00
        ("America/New_York", (2026, 3, 8), 23, "02:00"),  # 02:00 -> 03:00
    ],
)
def test_spring_forward_a_missing_hour_fires_once_after_the_gap(
    tz: str, date: tuple[int, int, int], hourly_count: int, skipped_wall: str
) -> None:
    start, end = day(tz, *date)
    hourly = firings("0 * * * *", tz, start, end)
    assert len(hourly) == hourly_count == len(set(hourly))
    assert "03:00" in [h[:5] for h in local(hourly, tz)]
    # A time inside the gap fires once, at the first instant after it (03:00 new time).
    (inside,) = firings("30 2 * * *", tz, start, end)
    assert local([inside], tz)[0][:5] == "03:00"
    assert skipped_wall not in [h[:5] for h in local(hourly, tz)]


@pytest.mark.parametrize(
    ("tz", "date"),
    [("Europe/Paris", (2026, 10, 25)), ("America/New_York", (2026, 11, 1))],
)
def test_fall_back_a_wildcard_fires_at_each_real_occurrence(
    tz: str, date: tuple[int, int, int]
) -> None:
    """cron(8): `*` in minute or hour runs on the wall clock as it is, so an
    every-15-minutes job has no one-hour hole every autumn."""
    start, end = day(tz, *date)
    hourly = firings("0 * * * *", tz, start, end)
    assert len(hourly) == 25 == len(set(hourly))  # a 25-hour day, every hour of it
    quarter = firings("*/15 * * * *", tz, start, end)
    assert len(quarter) == 100 and quarter == sorted(set(quarter))
    gaps = {b - a for a, b in pairwise(quarter)}
    assert gaps == {timedelta(minutes=15)}


@pytest.mark.parametrize(
    ("tz", "date"),
    [("Europe/Paris", (2026, 10, 25)), ("America/New_York", (2026, 11, 1))],
)
def test_fall_back_a_particular_time_fires_once_at_its_first_occurrence(
    tz: str, date: tuple[int, int, int]
) -> None:
    start, end = day(tz, *date)
    repeated = "02" if tz == "Europe/Paris" else "01"
    (once,) = firings(f"30 {repeated} * * *", tz, start, end)
    first_offset = "+0200" if tz == "Europe/Paris" else "-0400"
    assert local([once], tz) == [f"{repeated}:30{first_offset}"]


@pytest.mark.parametrize("tz", ["Europe/Paris", "America/New_York"])
def test_spring_forward_a_wildcard_skips_the_hour_that_never_happens(tz: str) -> None:
    start, end = day(tz, *((2026, 3, 29) if tz == "Europe/Paris" else (2026, 3, 8)))
    quarter = firings("*/15 * * * *", tz, start, end)
    assert len(quarter) == 92  # a 23-hour day
    assert not [wall for wall in local(quarter, tz) if wall.startswith("02:")]
    assert firings("*/10 2 * * *", tz, start, end) == []  # every time of it is in the gap


def test_lord_howe_thirty_minute_shifts() -> None:
    tz = "Australia/Lord_Howe"
    spring_start, spring_end = day(tz, 2026, 10, 4)  # 02:00 -> 02:30
    quarter = firings("*/15 * * * *", tz, spring_start, spring_end)
    assert len(quarter) == 96 - 2  # 02:00 and 02:15 never happen
    walls = local(quarter, tz)
    assert "02:00+1030" not in walls and "02:15+1030" not in walls
    assert walls.count("02:30+1100") == 1
    (inside,) = firings("15 2 * * *", tz, spring_start, spring_end)  # a particular time
    assert local([inside], tz) == ["02:30+1100"]
    autumn_start, autumn_end = day(tz, 2026, 4, 5)  # 02:00 -> 01:30
    quarter = firings("*/15 * * * *", tz, autumn_start, autumn_end)
    assert len(quarter) == 98 == len(set(quarter))  # the repeated 01:30-02:00 fires twice
    assert local(quarter, tz).count("01:45+1100") == 1
    assert local(quarter, tz).count("01:45+1030") == 1
    (once,) = firings("45 1 * * *", tz, autumn_start, autumn_end)
    assert local([once], tz) == ["01:45+1100"]


def test_intervals_fall_on_a_grid_shared_by_every_process() -> None:
    timing = Timing(None, 90.0)
    a = timing.after(datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC))
    b = timing.after(datetime(2026, 1, 1, 0, 1, 0, tzinfo=UTC))
    assert a == b == datetime(2026, 1, 1, 0, 1, 30, tzinfo=UTC)
    assert timing.after(a) == a + timedelta(seconds=90)


def test_seconds_field_and_macros() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert Timing("*/20 * * * * *", None).after(start) == start + timedelta(seconds=20)
    assert Timing("@hourly", None).after(start) == start + timedelta(hours=1)
    assert check_cron("  0   2 * * 1-5 ") == "0 2 * * 1-5"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "the minute field '61' is invalid"),
        ("* 25 * * *", "the hour field '25' is invalid"),
        ("* * 32 * *", "the day of month field '32' is invalid"),
        ("* * * 13 *", "the month field '13' is invalid"),
        ("* * * * 9", "the day of week field '9' is invalid"),
        ("99 * * * * *", "the second field '99' is invalid"),
        ("* * *", "has 3 fields"),
        ("0 0 1 1 * 2030 1", "has 7 fields"),
        ("@sometimes", "macro '@sometimes' is not known"),
        ("", "non-empty"),
    ],
)
def test_invalid_cron_names_the_field(expression: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        check_cron(expression)


def test_bad_zone_and_short_interval() -> None:
    with pytest.raises(ConfigurationError, match="unknown time zone 'Mars/Olympus'"):
        zone("Mars/Olympus")
    with pytest.raises(ConfigurationError, match="too short; the minimum is 1s"):
        check_interval("500ms")
