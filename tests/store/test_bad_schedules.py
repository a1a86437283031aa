"""A schedule that can never fire stops neither the scheduler nor anything else.

Refused where it is defined (in code or at run time); found in the database
(written by hand, or by a version that did not check), it is marked with the
reason, logged once at ERROR, reported by `due check`, and the others run on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import due
from due.clock import FakeClock
from due.errors import ConfigurationError
from due.scheduler.leader import DatabaseLeases, Leadership
from due.scheduler.service import Scheduler, SchedulerRound
from tests.helpers.database import plain_transaction

SPOILERS = {
    "feb-30": {"cron": "0 0 30 2 *", "every": None},  # CroniterBadDateError, deep inside
    "huge-interval": {"cron": None, "every": 1e12},  # OverflowError, deep inside
    "unreadable": {"payload": "[1]"},  # arguments that are not {"args", "kwargs"}
}


@pytest.fixture
def stamp(app: due.App) -> due.Task:
    @app.task(name="stamp")
    def stamp() -> None: ...

    return stamp


def spoil(url: str, name: str, columns: dict[str, Any]) -> None:
    """Write a schedule's row directly, as a hand or an older version might."""
    mark = "?" if url.startswith("sqlite") else "%s"
    assigned = ", ".join(f"{column} = {mark}" for column in columns)  # this file's names
    with plain_transaction(url) as conn:
        conn.execute(
            f"UPDATE due_schedules SET {assigned} WHERE name = {mark}", (*columns.values(), name)
        )


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


def invalid_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "schedule.invalid"]


@pytest.mark.parametrize("spoiler", sorted(SPOILERS))
def test_a_schedule_that_cannot_fire_is_marked_and_the_others_run(
    app: due.App,
    backend_url: str,
    clock: FakeClock,
    stamp: due.Task,
    spoiler: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app.add_schedule("broken", every="1h", task=stamp)
    app.add_schedule("good", every="1m", task=stamp, overlap="allow")
    spoil(backend_url, "broken", SPOILERS[spoiler])
    clock.advance("2h")  # both due; the broken one first
    scheduler = scheduler_of(app, clock)
    with caplog.at_level(logging.INFO, logger="due.scheduler"):
        done = lead(scheduler)
        assert [m.schedule for m in done.materialised if m.recorded] == ["good"]
        (logged,) = invalid_logs(caplog)
        assert logged.levelno == logging.ERROR
        reason = logged.fields["reason"]  # type: ignore[attr-defined]
        assert {"feb-30": "never fires", "huge-interval": "more than 10 years"}.get(
            spoiler, "cannot be read"
        ) in reason
        clock.advance("1m")
        again = lead(scheduler)  # not tried, nor logged, again
        assert [m.schedule for m in again.materialised] == ["good"] and len(
            invalid_logs(caplog)
        ) == 1
    stored = {s.name: s for s in app.store.schedule_list()}
    assert stored["broken"].problem == reason and stored["good"].problem is None
    assert app.store.schedule_next_fire() == stored["good"].next_fire_at  # not the broken one's
    latest = app.schedule_runs("good")[0]  # the good one ran on, to the last minute
    assert (latest.scheduled_for, latest.outcome) == (clock.now(), "enqueued")
    (alert,) = [a for a in app.check() if a.subject == "schedule broken"]
    assert (alert.severity.name, alert.kind) == ("CRITICAL", "schedule_invalid")
    assert reason in alert.message and "fix its definition" in alert.message
    assert app.schedule_health("broken", "3h") == []  # expects no time; raises nothing
    assert {o.stored.name for o in app.schedules()} == {"broken", "good"}


def test_status_and_sync_read_past_a_row_no_scheduler_has_seen(
    app: due.App, backend_url: str, clock: FakeClock, stamp: due.Task
) -> None:
    """Before any scheduler marks it: `due check` says why, and a worker's sync
    (which reads every row) goes on."""
    app.add_schedule("broken", every="1h", task=stamp)
    spoil(backend_url, "broken", SPOILERS["feb-30"])
    clock.advance("2h")
    (alert,) = app.check()
    assert alert.kind == "schedule_invalid" and "never fires" in alert.message
    app.schedule("nightly", "0 2 * * *", task=stamp)
    assert app.sync_schedules().added == ["nightly"]


def test_a_marked_schedule_fires_again_once_its_definition_is_written(
    app: due.App, backend_url: str, clock: FakeClock, stamp: due.Task
) -> None:
    app.schedule("nightly", "0 2 * * *", task=stamp)
    app.add_schedule("adhoc", "0 2 * * *", task=stamp)
    app.sync_schedules()
    for name in ("nightly", "adhoc"):
        spoil(backend_url, name, SPOILERS["feb-30"])
    clock.advance("1d")
    scheduler = scheduler_of(app, clock)
    lead(scheduler)
    assert all(s.problem is not None for s in app.store.schedule_list())
    assert app.sync_schedules().changed == ["nightly"]  # a worker starts: from the code
    app.remove_schedule("adhoc")  # one added at run time: removed and added again
    app.add_schedule("adhoc", "0 2 * * *", task=stamp)
    stored = {s.name: s for s in app.store.schedule_list()}
    assert stored["nightly"].schedule.timing.cron == "0 2 * * *"
    assert stored["nightly"].problem is None and stored["adhoc"].problem is None
    clock.advance("1d")
    lead(scheduler)
    assert [r.outcome for r in app.schedule_runs("nightly")] == ["enqueued"]
    assert [r.outcome for r in app.schedule_runs("adhoc")] == ["enqueued"]


@pytest.mark.parametrize(
    ("timing", "message"),
    [
        ({"cron": "0 0 30 2 *"}, "never fires.*is that day in that month"),
        ({"cron": "0 0 31 4,6,9,11 *"}, "never fires"),
        ({"cron": "0 9 * 2 MON#5"}, "2044-02-29, is more than 10 years away"),
        ({"every": 7e8}, "more than 10 years.*milliseconds"),
        ({"every": "3650d", "misfire_grace": 7e8}, "misfire_grace of .* more than 10 years"),
    ],
)
def test_add_schedule_refuses_a_schedule_that_cannot_fire(
    app: due.App, stamp: due.Task, timing: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"schedule 'x': .*{message}"):
        app.add_schedule("x", task=stamp, **timing)
    assert app.store.schedule_list() == []


def test_a_leap_day_is_a_time(app: due.App, clock: FakeClock, stamp: due.Task) -> None:
    """Its longest wait, across 2100 (not a leap year), is eight years."""
    clock.set(clock.now().replace(year=2097))
    schedule = app.add_schedule("leap", "0 0 29 2 *", task=stamp)
    assert schedule.timing.after(clock.now()) - clock.now() > timedelta(days=7 * 365)
