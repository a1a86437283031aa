"""Cron firings around every DST change of several zones and years, checked
against an independent brute force: walk every minute of real time, look at
the wall clock, and apply cron(8)'s rule directly (see scheduler/timing.py).

The brute force shares no code with due: its own cron matcher (the field
forms used here), its own reading of the wall clock (`astimezone`, whose
`fold` says which occurrence of a repeated time it is).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import takewhile
from zoneinfo import ZoneInfo

import pytest

from due.core.timing import Timing

ZONES = [
    "America/New_York",
    "Europe/Paris",
    "Australia/Lord_Howe",  # 30-minute shifts
    "Pacific/Chatham",  # UTC+12:45, changes at 02:45
    "America/Santiago",  # changes at midnight
]
YEARS = [2025, 2026, 2027]
EXPRESSIONS = [
    "*/15 * * * *",
    "0 * * * *",
    "@hourly",
    "*/10 2 * * *",
    "30 2 * * *",
    "0,30 1-3 * * *",
    "45 1 * * *",
    "0 0 * * *",
    "5 0-3 * * 0",
]
MINUTE = timedelta(minutes=1)
WINDOW = timedelta(hours=6)


def field_matches(field: str, value: int, low: int, high: int) -> bool:
    for part in field.split(","):
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if span == "*":
            first, last = low, high
        elif "-" in span:
            first, last = (int(x) for x in span.split("-"))
        else:
            first = last = int(span)
        if first <= value <= last and (value - first) % step == 0:
            return True
    return False


def cron_matches(expression: str, wall: datetime) -> bool:
    if expression == "@hourly":
        expression = "0 * * * *"
    minute, hour, day, month, weekday = expression.split()
    sunday_first = (wall.weekday() + 1) % 7
    return (
        field_matches(minute, wall.minute, 0, 59)
        and field_matches(hour, wall.hour, 0, 23)
        and field_matches(day, wall.day, 1, 31)
        and field_matches(month, wall.month, 1, 12)
        and field_matches(weekday, sunday_first, 0, 6)
    )


def brute_force(expression: str, tz: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    plain = expression.replace("@hourly", "0 * * * *").split()
    on_the_wall_clock = "*" in plain[0] or "*" in plain[1]
    fired: list[datetime] = []
    moment = start
    while moment < end:
        local = moment.astimezone(tz)
        wall = local.replace(tzinfo=None)
        if on_the_wall_clock:
            hit = cron_matches(expression, wall)  # every real occurrence, gaps never happen
        else:
            hit = cron_matches(expression, wall) and local.fold == 0  # first occurrence
            before = (moment - MINUTE).astimezone(tz).replace(tzinfo=None)
            skipped = wall - before - MINUTE  # wall time jumped over a gap?
            gap = [before + MINUTE * (n + 1) for n in range(int(skipped / MINUTE))]
            hit = hit or any(cron_matches(expression, w) for w in gap)
        if hit:
            fired.append(moment)
        moment += MINUTE
    return fired


def transitions(tz: ZoneInfo, year: int) -> list[datetime]:
    moment = datetime(year, 1, 1, tzinfo=UTC)
    found = []
    while moment.year == year:
        following = moment + timedelta(hours=1)
        if moment.astimezone(tz).utcoffset() != following.astimezone(tz).utcoffset():
            found.append(moment)
        moment = following
    return found


@pytest.mark.parametrize("zone_name", ZONES)
def test_cron_firings_match_a_brute_force_around_every_dst_change(zone_name: str) -> None:
    tz = ZoneInfo(zone_name)
    checked = 0
    for year in YEARS:
        changes = transitions(tz, year)
        assert changes, f"{zone_name} has no DST change in {year}"
        for change in changes:
            start, end = change - WINDOW, change + WINDOW
            for expression in EXPRESSIONS:
                expected = brute_force(expression, tz, start, end)
                timing = Timing(expression, None, zone_name)
                moments = timing.firings_after(start - timedelta(microseconds=1))
                got = list(takewhile(end.__gt__, moments))
                assert got == expected, (zone_name, str(change), expression)
                checked += len(expected)
    assert checked > 100
