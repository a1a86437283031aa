"""Times missed while no scheduler ran: each is recorded, and the scheduler
says so in one WARNING per schedule and catch-up, not one per time.

A worker down for six minutes under an every-10-seconds schedule logged 36
`schedule.missed` warnings on its restart, one per time, drowning the line
that said what happened.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

import due
from due.clock import FakeClock
from due.scheduler.leader import DatabaseLeases, Leadership
from due.scheduler.service import Scheduler, SchedulerRound


def scheduler_of(app: due.App, clock: FakeClock) -> Scheduler:
    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    return Scheduler(
        store=app.store,
        call=call,
        leadership=Leadership(DatabaseLeases(app.store), "leader", clock, ttl=10),
        database_now=clock.now,
    )


def lead(scheduler: Scheduler) -> SchedulerRound:
    return asyncio.run(scheduler.run_once())


def logged(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


@pytest.fixture
def stamp(app: due.App) -> due.Task:
    @app.task(name="stamp")
    def stamp() -> None: ...

    return stamp


@pytest.mark.parametrize("misfire", ["latest", "skip", "catch_up"])
def test_six_minutes_down_is_one_warning_with_the_count_and_every_time_recorded(
    app: due.App,
    clock: FakeClock,
    stamp: due.Task,
    misfire: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app.add_schedule("tick", every="10s", task=stamp, misfire=misfire, overlap="allow")
    scheduler = scheduler_of(app, clock)
    with caplog.at_level(logging.DEBUG, logger="due.scheduler"):
        lead(scheduler)  # running: nothing due yet
        clock.advance("6m")  # the worker was down
        lead(scheduler)
        clock.advance("10s")
        lead(scheduler)  # back on time: nothing more is missed
    runs = app.schedule_runs("tick", limit=100)
    missed = sorted(run.scheduled_for for run in runs if run.outcome == "missed")
    assert missed, "the test needs missed times"
    (summary,) = logged(caplog, "schedule.missed")
    assert summary.levelno == logging.WARNING
    fields: dict[str, Any] = summary.fields  # type: ignore[attr-defined]
    assert fields["schedule"] == "tick" and fields["missed"] == len(missed)
    assert fields["first"] == missed[0].isoformat() and fields["last"] == missed[-1].isoformat()
    assert fields["policy"] == misfire and "more" not in fields
    assert "due schedule runs tick" in fields["note"]
    each = logged(caplog, "schedule.missed_time")  # for whoever wants them: at DEBUG
    assert len(each) == len(missed) and {r.levelno for r in each} == {logging.DEBUG}
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r for r in warned if r.event.startswith("schedule.")] == [summary]  # type: ignore[attr-defined]


def test_past_the_times_recorded_one_by_one_the_summary_counts_the_rest(
    app: due.App, clock: FakeClock, stamp: due.Task, caplog: pytest.LogCaptureFixture
) -> None:
    app.add_schedule("tick", every="1s", task=stamp, misfire="skip")
    scheduler = scheduler_of(app, clock)
    start: datetime = clock.now()
    lead(scheduler)
    clock.advance("1h")
    with caplog.at_level(logging.INFO, logger="due.scheduler"):
        lead(scheduler)
    (summary,) = logged(caplog, "schedule.missed")
    fields: dict[str, Any] = summary.fields  # type: ignore[attr-defined]
    assert fields["missed"] == 3600  # every second of the hour, the first included
    assert fields["first"] > start.isoformat()
    assert "more scheduled times until" in fields["more"]
