"""Bad schedules are refused where they are defined, with what to fix."""

from __future__ import annotations

import pytest

import due
from due.errors import ConfigurationError


@pytest.fixture
def app() -> due.App:
    application = due.App("sqlite:///unused.db")

    @application.task(name="bill", queue="billing", priority=3, retry=due.Retry(max_attempts=7))
    def bill(period: str = "day") -> None: ...

    return application


def test_a_schedule_takes_its_tasks_queue_priority_and_attempts(app: due.App) -> None:
    schedule = app.schedule("nightly", "0 2 * * *", task="bill", tz="Europe/Paris")
    assert (schedule.queue, schedule.priority, schedule.max_attempts) == ("billing", 3, 7)
    assert schedule.misfire.value == "latest" and schedule.overlap.value == "forbid"
    assert app.defined_schedules == {"nightly": schedule}
    moved = app.schedule("urgent", every="5m", task=app.tasks.get("bill"), queue="fast", priority=9)
    assert (moved.queue, moved.priority) == ("fast", 9)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "0 2 * * *", "every": "1h"}, "exactly one of cron"),
        ({}, "exactly one of cron"),
        ({"cron": "0 25 * * *"}, "the hour field '25'"),
        ({"every": "0.5s"}, "too short"),
        ({"cron": "@daily", "tz": "Europe/Pariss"}, "unknown time zone 'Europe/Pariss'"),
        ({"cron": "@daily", "misfire": "later"}, "misfire='later' is not a policy"),
        ({"cron": "@daily", "overlap": "both"}, "overlap='both' is not a policy"),
        ({"cron": "@daily", "catch_up_limit": 0}, "catch_up_limit"),
        ({"cron": "@daily", "catch_up_limit": 10**12}, "catch_up_limit .* from 1 to 1000"),
        ({"cron": "0 0 30 2 *"}, "'0 0 30 2 \\*' never fires"),
        ({"cron": "0 0 31 11 *"}, "never fires"),
        ({"every": 7e8}, "more than 10 years.*milliseconds"),
        ({"every": 1e12}, "more than 100 years"),
        ({"cron": "@daily", "misfire_grace": "4000d"}, "misfire_grace of 4000d is more than 10"),
        ({"cron": "@daily", "alert_after": 7e8}, "alert_after of .* is more than 10 years"),
        ({"cron": "@daily", "args": ["day", "extra"]}, "too many"),
        ({"cron": "@daily", "args": [object()]}, "not JSON-serialisable"),
        ({"cron": "@daily", "queue": "bad queue"}, "only letters"),
    ],
)
def test_bad_schedules(app: due.App, options: dict, message: str) -> None:
    with pytest.raises((ConfigurationError, TypeError, ValueError), match=message):
        app.schedule("s", task="bill", **options)
    assert app.defined_schedules == {}


def test_unknown_task_and_duplicate_names(app: due.App) -> None:
    with pytest.raises(due.UnknownTaskError, match="did you mean 'bill'"):
        app.schedule("s", "@daily", task="bil")
    app.schedule("s", "@daily", task="bill")
    with pytest.raises(ConfigurationError, match="already defined"):
        app.schedule("s", "@hourly", task="bill")


def test_a_schedules_arguments_are_held_to_the_apps_payload_limit() -> None:
    """`App(max_payload_bytes=...)` bounds a schedule's arguments as it bounds a
    job's, both ways: they were held to the default 1 MiB instead."""
    small = due.App("sqlite:///unused.db", max_payload_bytes=1000)
    large = due.App("sqlite:///unused.db", max_payload_bytes=4 * 1024 * 1024)
    for app in (small, large):

        @app.task(name="load")
        def load(data: str) -> None: ...

    with pytest.raises(due.PayloadError, match="over the limit of 1000 bytes"):
        small.schedule("s", every="1h", task="load", args=["x" * 1000])
    assert small.defined_schedules == {}
    schedule = large.schedule("big", every="1h", task="load", args=["x" * 2_000_000])
    assert len(schedule.payload) > 2_000_000
