"""Deploys and schedules: every scheduled time stays accounted for.

During a rolling deploy old and new code start side by side, each syncing its
schedules; a definition change must not drop the times already due under the
old one, and an old process restarted must not switch off what new code added.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

import due
from due.clock import FakeClock
from due.scheduler.service import decide
from tests.conftest import START


@pytest.fixture
def report_task(app: due.App) -> due.Task:
    @app.task(name="report")
    def report(kind: str = "daily") -> None: ...

    return report


@pytest.fixture
def deploy(
    backend_url: str, clock: FakeClock, report_task: due.Task
) -> Iterator[Callable[[], due.App]]:
    """Another version of the code: an App of its own on the same database."""
    made: list[due.App] = []

    def version() -> due.App:
        other = due.App(backend_url, clock=clock)
        other.tasks.add(report_task)
        made.append(other)
        return other

    yield version
    for other in made:
        other.close()


def tick(app: due.App) -> None:
    """One scheduler round, as the leader does it."""
    for name in app.store.schedule_due_names():
        app.store.schedule_materialize(name, decide)


def outcomes(app: due.App, name: str) -> dict[timedelta, str]:
    """Each recorded time of the schedule (as an offset from START): its outcome."""
    return {run.scheduled_for - START: run.outcome for run in app.schedule_runs(name, 1000)}


Deploy = Callable[[], due.App]


def test_an_old_worker_restarted_mid_deploy_leaves_new_schedules_alone(deploy: Deploy) -> None:
    old, new = deploy(), deploy()
    old.schedule("nightly", "0 2 * * *", task="report")
    new.schedule("nightly", "0 2 * * *", task="report")
    new.schedule("hourly", "0 * * * *", task="report")  # added by the new code
    old.sync_schedules()
    new.sync_schedules()  # a new worker starts
    restarted = old.sync_schedules()  # an old one restarts before it is replaced
    assert {s.name: s.enabled for s in new.store.schedule_list()} == {
        "hourly": True,
        "nightly": True,
    }
    assert restarted.not_in_code == ["hourly"] and not restarted.changed  # (logged)
    clock = new.clock
    assert isinstance(clock, FakeClock)
    clock.advance("1h")
    tick(new)
    assert outcomes(new, "hourly") == {timedelta(hours=1): "enqueued"}


def test_a_definition_change_settles_the_times_already_due_under_the_old_one(
    app: due.App, deploy: Deploy, clock: FakeClock
) -> None:
    app.schedule("often", every="10m", task="report", misfire="catch_up", overlap="allow")
    app.sync_schedules()
    clock.advance("25m")  # 10m and 20m are due; no scheduler has acted on them yet
    new = deploy()
    new.schedule("often", every="15m", task="report", misfire="catch_up", overlap="allow")
    report = new.sync_schedules()
    assert report.changed == ["often"]
    assert [len(settled.recorded) for settled in report.settled] == [2]
    assert outcomes(app, "often") == {  # run under the old definition, by its policies
        timedelta(minutes=10): "enqueued",
        timedelta(minutes=20): "enqueued",
    }
    (stored,) = app.store.schedule_list()
    assert stored.next_fire_at == START + timedelta(minutes=30)  # the new one, from now on
    clock.advance("5m")
    tick(app)
    assert outcomes(app, "often")[timedelta(minutes=30)] == "enqueued"


def test_times_due_before_a_change_follow_the_old_misfire_policy(
    app: due.App, deploy: Deploy, clock: FakeClock
) -> None:
    """A change after an outage: the old definition's missed times are recorded
    as missed (policy latest: the newest runs), none vanishes."""
    app.schedule("often", every="10m", task="report")
    app.sync_schedules()
    clock.advance("45m")
    new = deploy()
    new.schedule("often", every="10m", task="report", args=["weekly"])
    new.sync_schedules()
    assert outcomes(app, "often") == {
        timedelta(minutes=10): "missed",
        timedelta(minutes=20): "missed",
        timedelta(minutes=30): "missed",
        timedelta(minutes=40): "enqueued",
    }
    (job,) = app.jobs()
    assert job.args == ()  # the old definition's arguments: it was due under it


def test_prune_disables_what_the_code_dropped_after_settling_its_due_times(
    app: due.App, deploy: Deploy, clock: FakeClock
) -> None:
    app.schedule("often", every="10m", task="report", overlap="allow")
    app.schedule("kept", every="1h", task="report")
    app.sync_schedules()
    clock.advance("10m")
    new = deploy()
    new.schedule("kept", every="1h", task="report")
    defined = list(new.defined_schedules.values())
    assert new.store.schedule_sync(defined, decide).not_in_code == ["often"]
    assert new.prune_schedules(by="ops") == ["often"]
    assert outcomes(app, "often") == {timedelta(minutes=10): "enqueued"}
    assert [(a.action, a.by) for a in new.history(schedule="often")] == [("prune", "ops")]
    clock.advance("1h")
    tick(app)
    assert list(outcomes(app, "often")) == [timedelta(minutes=10)]  # disabled: no more times
