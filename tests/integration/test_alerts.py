"""Each alert fires on its condition and clears when it ends, on every backend."""

from __future__ import annotations

from datetime import timedelta

import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.jobs import AttemptError
from due.core.records import ClaimRequest, Completion, WorkerRegistration
from due.scheduler.service import decide
from due.testing import drain
from due.visibility.alerts import Alert, Severity, worst
from tests.conftest import START


@pytest.fixture
def work(app: due.App) -> due.Task:
    @app.task(name="work", retry=due.Retry(max_attempts=1), stuck_after="1m")
    def work(n: int = 0) -> int:
        return n

    return work


def serve(app: due.App, *queues: str, worker: str = "w:1:aa") -> None:
    """A live worker serving these queues (registered, or seen again, now by the
    app's clock)."""
    if worker in {info.id for info in app.store.worker_list()}:
        app.store.worker_touch(worker)
    else:
        registration = WorkerRegistration(
            worker, "host", 1, dict.fromkeys(queues, 4), app.tasks.names()
        )
        app.store.worker_register(registration)


def kinds(alerts: list[Alert]) -> list[tuple[str, str, str]]:
    return [(a.severity.name, a.kind, a.subject) for a in alerts]


def test_nothing_to_say_when_all_is_well(app: due.App, work: due.Task) -> None:
    work.enqueue()
    serve(app, "default")
    drain(app)
    assert app.check() == [] and worst([]) == Severity.OK


def test_the_oldest_due_job_warns_then_goes_critical_then_clears(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    app.queue("default", oldest_due_warning="30s", oldest_due_critical="2m")
    work.enqueue()
    serve(app, "default")
    clock.advance("20s")
    serve(app, "default")  # (seen again: still live)
    assert app.check() == []
    clock.advance("20s")
    serve(app, "default")
    (alert,) = app.check()
    assert alert.line() == ("WARNING queue default: oldest due job waited 40s (warning over 30s)")
    clock.advance("2m")
    serve(app, "default")
    (alert,) = app.check()
    assert alert.severity == Severity.CRITICAL
    assert alert.message == "oldest due job waited 2m40s (critical over 2m)"
    drain(app)
    assert app.check() == []


def test_thresholds_for_other_queues_come_from_the_defaults_or_the_caller(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    work.options(queue="bulk").enqueue()
    clock.advance("90s")
    serve(app, "bulk")
    assert kinds(app.check()) == [("WARNING", "oldest_due", "queue bulk")]  # over 1m
    assert app.check(oldest_due_warning="2m", oldest_due_critical="10m") == []
    app.pause_queue("bulk")
    assert app.check() == []  # waiting on purpose


def test_due_jobs_that_no_live_worker_serves(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    work.enqueue()
    assert kinds(app.check()) == [("CRITICAL", "no_worker", "queue default")]
    serve(app, "other")
    assert kinds(app.check()) == [("CRITICAL", "no_worker", "queue default")]
    serve(app, "default", worker="w:2:bb")
    assert app.check() == []
    clock.advance("40s")  # the worker went silent: not live any more (30 s)
    assert "no_worker" in {a.kind for a in app.check()}


def test_stuck_jobs(app: due.App, work: due.Task, clock: FakeClock) -> None:
    job = work.enqueue()
    (claimed,) = app.store.job_claim(ClaimRequest("default", 1, "w", 600))
    clock.advance("2m")
    serve(app, "default")
    assert kinds(app.check()) == [("WARNING", "stuck", "queue default")]
    done = Completion(job.id, claimed.lease_token, JobState.SUCCEEDED, result="null")
    app.store.job_complete([done])
    assert app.check() == []


def test_failures_within_the_window(app: due.App, clock: FakeClock) -> None:
    @app.task(name="fragile", retry=due.Retry(max_attempts=1))
    def fragile() -> None:
        raise ValueError("no")

    fragile.enqueue()
    fragile.enqueue()
    serve(app, "default")
    drain(app)
    (alert,) = app.check()
    assert alert.line() == (
        "WARNING task fragile: 2 jobs of queue default failed for good in the last 1h"
    )
    clock.advance("61m")
    serve(app, "default")
    assert app.check() == []
    assert kinds(app.check(failures_window="2h")) == [("WARNING", "failed", "task fragile")]


def test_results_that_fail_their_check(app: due.App, clock: FakeClock) -> None:
    @app.task(name="report", check=lambda rows: "empty report" if rows == 0 else None)
    def report(rows: int) -> int:
        return rows

    report.enqueue(5)
    serve(app, "default")
    drain(app)
    assert app.check() == []
    job = report.enqueue(0)
    drain(app)
    assert app.get(job.id).state == JobState.SUCCEEDED
    assert app.get(job.id).warning == "empty report"
    (alert,) = app.check()
    assert (alert.severity, alert.kind, alert.subject) == (
        Severity.WARNING,
        "warned",
        "task report",
    )
    clock.advance("2h")
    serve(app, "default")
    assert app.check() == []


def test_a_check_that_raises_is_a_warning_not_a_failure(app: due.App) -> None:
    @app.task(name="picky", check=lambda result: result["missing"])
    def picky() -> dict:
        return {}

    job = picky.enqueue()
    drain(app)
    done = app.get(job.id)
    assert done.state == JobState.SUCCEEDED
    assert done.warning == "its check= raised KeyError: 'missing'"


def test_a_schedule_whose_time_passed_without_a_run(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    app.add_schedule("hourly", every="1h", task=work, alert_after="5m")
    serve(app, "default")
    clock.advance("1h3m")
    serve(app, "default")
    assert app.check() == []  # within its tolerance
    clock.advance("3m")
    serve(app, "default")
    alerts = app.check()
    assert kinds(alerts) == [
        ("CRITICAL", "schedule_late", "schedule hourly"),
        ("WARNING", "schedule_silent", "schedule hourly"),  # and nothing succeeded since
    ]
    assert "passed 6m ago without a run: is a scheduler running?" in alerts[0].message
    app.store.schedule_materialize("hourly", decide)  # a scheduler acts again
    assert kinds(app.check()) == [
        ("CRITICAL", "oldest_due", "queue default"),  # its run waited 6m to be claimed
        ("WARNING", "run_not_started", "schedule hourly"),
        ("WARNING", "schedule_silent", "schedule hourly"),
    ]
    drain(app)
    assert app.check() == []
    app.pause_schedule("hourly")
    clock.advance("3h")
    serve(app, "default")
    assert app.check() == []  # a paused schedule raises nothing


def test_a_schedule_with_no_success_within_its_period(app: due.App, clock: FakeClock) -> None:
    @app.task(name="nightly", retry=due.Retry(max_attempts=1))
    def nightly(fail: bool = False) -> None:
        if fail:
            raise RuntimeError("the report broke")

    app.add_schedule("nightly", cron="0 2 * * *", task=nightly, alert_after="10m")

    def night(fail: bool) -> None:
        run = app.store.schedule_materialize("nightly", decide)
        assert run is not None and run.recorded
        (job_id,) = [job for _, job in run.recorded]
        (claimed,) = app.store.job_claim(ClaimRequest("default", 1, "w", 60))
        assert claimed.id == job_id
        state = JobState.FAILED if fail else JobState.SUCCEEDED
        error = AttemptError(1, "the report broke", None, START) if fail else None
        app.store.job_complete([Completion(job_id, claimed.lease_token, state, "null", error)])

    first_night = (START + timedelta(days=1)).replace(hour=2)
    clock.set(first_night)
    night(fail=False)
    serve(app, "default")
    assert app.check() == []
    clock.set(first_night + timedelta(days=1))
    night(fail=True)  # the report broke: no success tonight
    clock.advance("9m")
    serve(app, "default")
    assert "schedule_silent" not in {a.kind for a in app.check()}  # period + 10m not over
    clock.advance("2m")
    serve(app, "default")
    silent = [a for a in app.check() if a.kind == "schedule_silent"]
    assert [a.subject for a in silent] == ["schedule nightly"]
    assert "no success since" in silent[0].message and "its period is 1d" in silent[0].message
