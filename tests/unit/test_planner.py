"""The planner: misfire and overlap policies as a pure function of time and state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from due.core.schedules import Misfire, Outcome, Overlap
from due.scheduler.definition import define_schedule
from due.scheduler.planner import MAX_COUNTED_TIMES, MAX_RECORDED_TIMES, plan

T0 = datetime(2030, 1, 1, 0, 0, tzinfo=UTC)


def hourly(**options: object) -> object:
    return define_schedule(
        "s",
        task="t",
        cron="0 * * * *",
        queue="default",
        priority=0,
        max_attempts=3,
        now=T0,
        **options,
    )  # type: ignore[arg-type]


def outcomes(result: object) -> list[tuple[int, str]]:
    return [
        (int((f.scheduled_for - T0).total_seconds() // 3600), f.outcome.value)
        for f in result.firings
    ]  # type: ignore[attr-defined]


def test_a_time_on_time_is_enqueued_and_the_next_one_planned() -> None:
    result = plan(hourly(), T0, T0 + timedelta(seconds=2))
    assert outcomes(result) == [(0, "enqueued")]
    assert result.next_fire_at == T0 + timedelta(hours=1)


def test_nothing_before_its_time() -> None:
    result = plan(hourly(), T0, T0 - timedelta(seconds=1))
    assert result.firings == [] and result.next_fire_at == T0


@pytest.mark.parametrize(
    ("misfire", "expected"),
    [
        (Misfire.SKIP, [(0, "missed"), (1, "missed"), (2, "missed"), (3, "missed")]),
        (Misfire.LATEST, [(0, "missed"), (1, "missed"), (2, "missed"), (3, "enqueued")]),
        (Misfire.CATCH_UP, [(0, "enqueued"), (1, "enqueued"), (2, "missed"), (3, "missed")]),
    ],
)
def test_misfire_policies_after_an_outage(misfire: Misfire, expected: list) -> None:
    schedule = hourly(misfire=misfire, catch_up_limit=2, overlap="allow")
    result = plan(schedule, T0, T0 + timedelta(hours=3, minutes=30))  # down 3.5 hours
    assert outcomes(result) == expected
    assert result.next_fire_at == T0 + timedelta(hours=4)
    missed = result.of(Outcome.MISSED)
    assert all("past the misfire grace" in (f.reason or "") for f in missed)


def test_latest_yields_to_a_time_that_is_on_time() -> None:
    schedule = hourly(misfire="latest", misfire_grace="10m")
    result = plan(schedule, T0, T0 + timedelta(hours=2, minutes=5))
    assert outcomes(result) == [(0, "missed"), (1, "missed"), (2, "enqueued")]


@pytest.mark.parametrize(
    ("overlap", "expected", "cancel"),
    [
        (Overlap.ALLOW, [(0, "enqueued"), (1, "enqueued")], False),
        (Overlap.FORBID, [(0, "skipped"), (1, "skipped")], False),
        (Overlap.QUEUE, [(0, "pending"), (1, "skipped")], False),
        (Overlap.REPLACE, [(0, "skipped"), (1, "pending")], True),
    ],
)
def test_overlap_policies_while_a_run_is_active(
    overlap: Overlap, expected: list, cancel: bool
) -> None:
    schedule = hourly(overlap=overlap, misfire_grace="3h")
    result = plan(schedule, T0, T0 + timedelta(hours=1, minutes=1), active=True)
    assert outcomes(result) == expected
    assert result.cancel_active is cancel


def test_queue_keeps_at_most_one_run_waiting() -> None:
    schedule = hourly(overlap="queue")
    result = plan(schedule, T0, T0 + timedelta(seconds=1), active=True, pending=True)
    assert outcomes(result) == [(0, "skipped")]
    assert "already waits" in (result.firings[0].reason or "")


def test_forbid_within_one_plan_starts_only_the_first() -> None:
    schedule = hourly(overlap="forbid", misfire_grace="1d")
    result = plan(schedule, T0, T0 + timedelta(hours=2, seconds=1))
    assert outcomes(result) == [(0, "enqueued"), (1, "skipped"), (2, "skipped")]


def test_a_paused_schedule_records_its_times_as_skipped() -> None:
    result = plan(hourly(), T0, T0 + timedelta(hours=2, seconds=1), paused=True)
    assert outcomes(result) == [(0, "skipped"), (1, "skipped"), (2, "skipped")]
    assert {f.reason for f in result.firings} == {"the schedule is paused"}
    assert result.next_fire_at == T0 + timedelta(hours=3)


def test_a_long_outage_is_summed_up_not_listed_forever() -> None:
    every_second = define_schedule(
        "s", task="t", every="1s", queue="q", priority=0, max_attempts=1, misfire="skip", now=T0
    )
    result = plan(every_second, T0, T0 + timedelta(days=7))
    assert len(result.firings) == MAX_RECORDED_TIMES + 1
    summary = result.firings[-1]
    assert summary.outcome == Outcome.MISSED and summary.scheduled_for == T0 + timedelta(
        seconds=MAX_RECORDED_TIMES
    )
    assert f"{7 * 86400 + 1 - MAX_RECORDED_TIMES} more scheduled times" in (summary.reason or "")
    assert summary.times == 7 * 86400 + 1 - MAX_RECORDED_TIMES  # counted, for the log's summary
    assert {f.times for f in result.firings[:-1]} == {1}
    assert result.next_fire_at == T0 + timedelta(days=7, seconds=1)


def test_a_long_cron_outage_is_counted_up_to_a_bound() -> None:
    """Counting cron times walks them one by one, inside the leader's transaction:
    past MAX_COUNTED_TIMES the summary says so instead of counting on."""
    every_minute = define_schedule(
        "m",
        cron="* * * * *",
        task="t",
        queue="q",
        priority=0,
        max_attempts=1,
        misfire="skip",
        now=T0,
    )
    result = plan(every_minute, T0, T0 + timedelta(days=120))
    summary = result.firings[-1]
    assert f"at least {MAX_COUNTED_TIMES} more scheduled times" in (summary.reason or "")
    assert summary.times == MAX_COUNTED_TIMES
    short = plan(every_minute, T0, T0 + timedelta(minutes=MAX_RECORDED_TIMES + 9))
    assert "10 more scheduled times" in (short.firings[-1].reason or "")


@pytest.mark.parametrize("overlap", [Overlap.FORBID, Overlap.QUEUE, Overlap.REPLACE])
def test_catch_up_runs_every_missed_time_one_after_another(overlap: Overlap) -> None:
    """A leader taking over after an outage enqueued the first missed time and
    skipped the rest ("the previous run was still active": its own catch-up run)."""
    schedule = hourly(misfire="catch_up", catch_up_limit=3, overlap=overlap)
    result = plan(schedule, T0, T0 + timedelta(hours=3, minutes=30))
    assert outcomes(result) == [(0, "enqueued"), (1, "pending"), (2, "pending"), (3, "missed")]
    assert not result.cancel_active
    busy = plan(schedule, T0, T0 + timedelta(hours=1, minutes=30), active=True)
    assert outcomes(busy) == [(0, "pending"), (1, "pending")]  # in line behind the active run


def test_catch_up_with_overlaps_allowed_runs_them_together() -> None:
    schedule = hourly(misfire="catch_up", overlap="allow")
    result = plan(schedule, T0, T0 + timedelta(hours=2, minutes=30), active=True)
    assert outcomes(result) == [(0, "enqueued"), (1, "enqueued"), (2, "enqueued")]


def test_an_on_time_run_after_a_catch_up_follows_the_overlap_policy() -> None:
    schedule = hourly(misfire="catch_up", overlap="forbid", misfire_grace="10m")
    result = plan(schedule, T0, T0 + timedelta(hours=2, minutes=5))
    assert outcomes(result) == [(0, "enqueued"), (1, "pending"), (2, "skipped")]
