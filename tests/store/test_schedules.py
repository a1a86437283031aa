"""Schedules on every backend: sync, one run per scheduled time, policies, leases."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.records import ClaimRequest, Retention
from due.core.schedules import LeaseFence
from due.scheduler.service import decide
from due.testing import drain

MONDAY = datetime(2030, 1, 7, 0, 0, tzinfo=UTC)


@pytest.fixture
def app(backend_url: str) -> due.App:
    clock = FakeClock(MONDAY)
    application = due.App(backend_url, clock=clock)
    application.migrate()

    @application.task(name="report")
    def report(ctx: due.Context, kind: str = "daily") -> str:
        return f"{kind} for {ctx.scheduled_for.isoformat() if ctx.scheduled_for else None}"

    yield application
    application.close()


def tick(app: due.App) -> list:
    """One scheduler round, as the leader does it."""
    done = []
    for name in app.store.schedule_due_names():
        result = app.store.schedule_materialize(name, decide)
        if result:
            done.extend(result.recorded)
    for name in app.store.schedule_names_with_pending_runs():
        app.store.schedule_start_pending_run(name)
    return done


def clock_of(app: due.App) -> FakeClock:
    assert isinstance(app.clock, FakeClock)
    return app.clock


def scheduled_jobs(app: due.App, name: str) -> list[due.Job]:
    return [job for job in app.jobs(limit=100_000) if job.schedule == name]


def test_sync_adds_and_changes_code_schedules_and_prune_disables(
    app: due.App, backend_url: str
) -> None:
    app.schedule("daily", "0 6 * * *", task="report")
    app.schedule("often", every="10m", task="report")
    report = app.sync_schedules()
    assert sorted(report.added) == ["daily", "often"] and not report.changed
    assert app.sync_schedules().added == []  # idempotent
    app.add_schedule("adhoc", every="1h", task="report")

    later = due.App(backend_url, clock=app.clock)
    later.tasks.add(app.tasks.get("report"))
    later.schedule("daily", "0 7 * * *", task="report")  # changed; "often" removed from code
    report = later.sync_schedules()
    assert report.changed == ["daily"] and report.not_in_code == ["often"] and not report.added
    stored = {s.name: s for s in later.store.schedule_list()}
    assert stored["daily"].next_fire_at == MONDAY + timedelta(hours=7)
    assert stored["often"].enabled  # a sync disables nothing: newer code may define it
    assert later.prune_schedules() == ["often"]  # asked for, once every worker runs it
    stored = {s.name: s for s in later.store.schedule_list()}
    assert not stored["often"].enabled and stored["adhoc"].enabled  # runtime ones stay
    assert stored["adhoc"].source == "runtime"
    assert later.prune_schedules() == [] and later.sync_schedules().not_in_code == []
    later.close()


def test_a_week_of_hourly_and_every_minute_runs_each_time_once(app: due.App) -> None:
    app.schedule("hourly", "0 * * * *", task="report", args=["hourly"])
    app.schedule(
        "minutely",
        every="60s",
        task="report",
        overlap="allow",
        misfire_grace="2h",
        queue="minutely",
    )
    app.sync_schedules()
    clock = clock_of(app)
    for _ in range(7 * 24):
        clock.advance("1h")
        tick(app)
        drain(app, queues=["default"])  # the hourly runs (forbid: each must end in time)
    hourly, minutely = scheduled_jobs(app, "hourly"), scheduled_jobs(app, "minutely")
    assert len(hourly) == 7 * 24 and len(minutely) == 7 * 24 * 60
    for jobs in (hourly, minutely):
        moments = [job.scheduled_for for job in jobs]
        assert len(set(moments)) == len(moments), "a scheduled time ran twice"
    assert {job.state for job in hourly} == {JobState.SUCCEEDED}
    assert min(j.scheduled_for for j in hourly) == MONDAY + timedelta(hours=1)
    assert max(j.scheduled_for for j in minutely) == MONDAY + timedelta(days=7)
    sample = next(job for job in hourly if job.scheduled_for == MONDAY + timedelta(hours=5))
    assert sample.result == f"hourly for {sample.scheduled_for.isoformat()}"  # ctx.scheduled_for


def test_paris_hourly_across_both_transitions(app: due.App) -> None:
    clock = clock_of(app)
    clock.set(datetime(2030, 3, 30, 12, tzinfo=UTC))  # the day before spring forward
    app.schedule("paris", "0 * * * *", task="report", tz="Europe/Paris", overlap="allow")
    app.sync_schedules()
    for _ in range(48):
        clock.advance("1h")
        tick(app)
    spring = Counter(
        job.scheduled_for.astimezone(ZoneInfo("Europe/Paris")).date()
        for job in scheduled_jobs(app, "paris")
    )
    assert spring[datetime(2030, 3, 31, tzinfo=UTC).date()] == 23
    clock.set(datetime(2030, 10, 26, 12, tzinfo=UTC))
    app.store.schedule_materialize("paris", lambda s, now, a, p: _from(s, now, a, p, reset=True))
    for _ in range(48):
        clock.advance("1h")
        tick(app)
    autumn = Counter(
        job.scheduled_for.astimezone(ZoneInfo("Europe/Paris")).date()
        for job in scheduled_jobs(app, "paris")
    )
    # A 25-hour day; `*` in the hour field runs on the wall clock as it is (cron(8)).
    assert autumn[datetime(2030, 10, 27, tzinfo=UTC).date()] == 25


def _from(stored, now, active, pending, reset=False):  # type: ignore[no-untyped-def]
    """A plan that only moves the schedule to now (skipping the months in between)."""
    from due.core.schedules import Plan

    return Plan(next_fire_at=stored.schedule.timing.after(now))


def test_a_second_scheduler_creates_no_second_run(app: due.App, backend_url: str) -> None:
    app.schedule("billing", "0 2 * * *", task="report")
    app.sync_schedules()
    clock_of(app).set(MONDAY + timedelta(hours=2))
    other = due.App(backend_url, clock=app.clock)
    results: list = []
    threads = [
        threading.Thread(
            target=lambda a=a: results.append(a.store.schedule_materialize("billing", decide))
        )
        for a in (app, other)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    other.close()
    assert sum(len(result.recorded) for result in results) == 1
    # A paused old leader wakes up with a stale plan: the key still stops it.
    stale = app.store.schedule_list()[0]
    replay = app.store.schedule_materialize(
        "billing", lambda s, now, a, p: decide(_rewound(s, stale), now, False, False)
    )
    assert replay is not None and replay.recorded == []
    assert len(scheduled_jobs(app, "billing")) == 1


def _rewound(current, stale):  # type: ignore[no-untyped-def]
    current.next_fire_at = MONDAY + timedelta(hours=2)
    return current


def test_catch_up_after_an_outage_runs_the_oldest_within_the_limit(app: due.App) -> None:
    app.schedule(
        "hourly", "0 * * * *", task="report", misfire="catch_up", catch_up_limit=2, overlap="allow"
    )
    app.sync_schedules()
    clock_of(app).advance("5h30m")  # down since midnight
    recorded = tick(app)
    assert [(f.scheduled_for.hour, f.outcome.value) for f, _ in recorded] == [
        (1, "enqueued"),
        (2, "enqueued"),
        (3, "missed"),
        (4, "missed"),
        (5, "missed"),
    ]
    runs = app.schedule_runs("hourly")
    assert len(runs) == 5 and all(run.reason for run in runs if run.outcome == "missed")
    overview = {o.stored.name: o for o in app.schedules()}["hourly"]
    assert overview.missed == 3 and overview.stored.next_fire_at == MONDAY + timedelta(hours=6)


@pytest.mark.parametrize("overlap", ["forbid", "queue"])
def test_a_new_leader_catches_up_every_missed_time_in_line(app: due.App, overlap: str) -> None:
    """Catch-up with forbid enqueued the first missed time and skipped the rest as
    "the previous run was still active": the catch-up run just enqueued."""
    app.schedule(
        "nightly",
        "0 * * * *",
        task="report",
        misfire="catch_up",
        catch_up_limit=3,
        overlap=overlap,
        misfire_grace="10m",
    )
    app.sync_schedules()
    clock_of(app).advance("3h30m")  # every scheduler was down (a leader killed)
    recorded = tick(app)
    assert [(f.scheduled_for.hour, f.outcome.value) for f, _ in recorded] == [
        (1, "enqueued"),
        (2, "pending"),
        (3, "pending"),
    ]
    ran = []
    for _ in range(3):
        (job,) = [j for j in scheduled_jobs(app, "nightly") if j.state == JobState.QUEUED]
        ran.append(job.scheduled_for.hour)
        assert len(drain(app).succeeded) == 1  # one at a time: the next waits for it
        tick(app)
    assert ran == [1, 2, 3]
    assert [r.outcome for r in app.schedule_runs("nightly")] == ["enqueued"] * 3


@pytest.mark.parametrize("stop", ["pause", "disable", "remove"])
def test_a_waiting_run_does_not_start_once_its_schedule_stopped(app: due.App, stop: str) -> None:
    if stop == "remove":  # only a schedule added at run time can be removed
        app.add_schedule("queued", "*/10 * * * *", task="report", overlap="queue")
    else:
        app.schedule("queued", "*/10 * * * *", task="report", overlap="queue")
        app.sync_schedules()
    clock = clock_of(app)
    clock.advance("10m")
    tick(app)
    (running,) = app.store.job_claim(ClaimRequest("default", 1, "w", 3600))
    clock.advance("10m")
    tick(app)  # the next run waits for the one running
    assert app.schedule_runs("queued")[0].outcome == "pending"
    if stop == "pause":
        app.pause_schedule("queued")
    elif stop == "disable":
        assert app.store.schedule_prune([], decide) == ["queued"]  # gone from the code
    else:
        app.remove_schedule("queued")
    app.store.job_complete([_done(running)])
    tick(app)
    assert len(scheduled_jobs(app, "queued")) == 1  # no second run started
    latest = app.schedule_runs("queued")[0]
    assert latest.outcome == "skipped" and "the schedule" in (latest.reason or "")


def test_forbid_skips_a_time_while_the_previous_run_is_going(app: due.App) -> None:
    app.schedule("slow", "*/10 * * * *", task="report", overlap="forbid")
    app.sync_schedules()
    clock = clock_of(app)
    clock.advance("10m")
    first = tick(app)
    app.store.job_claim(
        ClaimRequest("default", 1, "w", 3600)
    )  # the run is still running at the next time
    clock.advance("10m")
    second = tick(app)
    assert [f.outcome.value for f, _ in first] == ["enqueued"]
    assert [(f.outcome.value, f.reason) for f, _ in second] == [
        ("skipped", "the previous run was still active")
    ]
    assert len(scheduled_jobs(app, "slow")) == 1


def test_queue_starts_the_waiting_run_when_the_previous_ends(app: due.App) -> None:
    app.schedule("queued", "*/10 * * * *", task="report", overlap="queue")
    app.sync_schedules()
    clock = clock_of(app)
    clock.advance("10m")
    tick(app)
    (running,) = app.store.job_claim(ClaimRequest("default", 1, "w", 3600))
    clock.advance("10m")
    tick(app)
    assert app.store.schedule_start_pending_run("queued") is None  # still running
    assert [r.outcome for r in app.schedule_runs("queued")] == ["pending", "enqueued"]
    app.store.job_complete([_done(running)])
    tick(app)
    runs = app.schedule_runs("queued")
    assert [r.outcome for r in runs] == ["enqueued", "enqueued"]
    assert runs[0].reason == "started when the previous run ended"
    assert len(scheduled_jobs(app, "queued")) == 2


def test_replace_cancels_the_previous_run_then_starts(app: due.App) -> None:
    app.schedule("fresh", "*/10 * * * *", task="report", overlap="replace")
    app.sync_schedules()
    clock = clock_of(app)
    clock.advance("10m")
    tick(app)
    (old,) = scheduled_jobs(app, "fresh")
    clock.advance("10m")
    tick(app)  # the old run never started: it is cancelled, the new one starts
    jobs = {job.scheduled_for: job for job in scheduled_jobs(app, "fresh")}
    assert jobs[old.scheduled_for].state == JobState.CANCELLED
    assert jobs[MONDAY + timedelta(minutes=20)].state == JobState.QUEUED
    (running,) = app.store.job_claim(ClaimRequest("default", 1, "w", 3600))
    clock.advance("10m")
    tick(app)  # a running one is asked to stop; the new run waits for it
    assert app.get(running.id).cancel_requested
    assert app.schedule_runs("fresh")[0].outcome == "pending"


def test_a_paused_schedule_skips_and_a_resumed_one_goes_on(app: due.App) -> None:
    app.schedule("paused", "0 * * * *", task="report")
    app.sync_schedules()
    app.pause_schedule("paused")
    clock = clock_of(app)
    clock.advance("3h")
    tick(app)
    assert [r.outcome for r in app.schedule_runs("paused")] == ["skipped"] * 3
    app.resume_schedule("paused")
    clock.advance("1h")
    tick(app)
    assert app.schedule_runs("paused")[0].outcome == "enqueued"
    with pytest.raises(due.ScheduleNotFoundError):
        app.pause_schedule("nope")


def test_trigger_and_remove(app: due.App) -> None:
    app.add_schedule("adhoc", every="1h", task="report", kwargs={"kind": "adhoc"})
    job = app.trigger_schedule("adhoc")
    assert job.schedule == "adhoc" and job.kwargs == {"kind": "adhoc"}
    assert app.schedule_runs("adhoc")[0].reason == "triggered by hand"
    with pytest.raises(due.ConfigurationError, match="already exists"):
        app.add_schedule("adhoc", every="2h", task="report")
    app.remove_schedule("adhoc")
    assert app.store.schedule_list() == []
    with pytest.raises(due.ScheduleNotFoundError):
        app.remove_schedule("adhoc")
    with pytest.raises(due.ScheduleNotFoundError):  # as every other action says it
        app.trigger_schedule("adhoc")


def test_leader_lease_terms_and_fencing(app: due.App) -> None:
    store, clock = app.store, clock_of(app)
    first = store.lease_acquire("scheduler", "a", 10)
    assert first == 1 and store.lease_acquire("scheduler", "b", 10) is None
    assert store.lease_acquire("scheduler", "a", 10) == 1  # its own: same term
    clock.advance("5s")
    assert store.lease_renew("scheduler", "a", 1, 10)
    clock.advance("11s")  # a stops renewing
    assert not store.lease_renew("scheduler", "a", 1, 10)
    assert store.lease_acquire("scheduler", "b", 10) == 2  # a new term
    app.schedule("fenced", "0 * * * *", task="report")
    app.sync_schedules()
    clock.advance("1h")  # b's lease has expired meanwhile: taking it again is a new term
    assert store.lease_acquire("scheduler", "b", 10) == 3
    for stale in (LeaseFence("scheduler", "a", 1), LeaseFence("scheduler", "b", 2)):
        assert (
            store.schedule_materialize("fenced", decide, stale) is None
        )  # no writes from old terms
    assert store.schedule_materialize("fenced", decide, LeaseFence("scheduler", "b", 3)) is not None
    store.lease_release("scheduler", "b", 3)
    assert store.lease_acquire("scheduler", "c", 10) == 4  # free at once


def test_pruning_keeps_recent_work_and_the_newest_job(app: due.App) -> None:
    report = app.tasks.get("report")
    old = [report.enqueue() for _ in range(3)]
    drain(app)
    app.schedule("h", "0 * * * *", task="report")
    app.sync_schedules()
    clock = clock_of(app)
    clock.advance("1h")
    tick(app)
    drain(app)
    clock.advance("15d")
    recent = report.enqueue()
    assert app.store.job_prune(Retention(14 * 86400, 14 * 86400)) == (4, 1)
    remaining = {job.id for job in app.jobs(limit=100)}
    assert remaining == {recent.id}
    assert {job.id for job in old}.isdisjoint(remaining)


def _done(claimed):  # type: ignore[no-untyped-def]
    from due.core.records import Completion

    return Completion(claimed.id, claimed.lease_token, JobState.SUCCEEDED, result="null")


def sync_at(app: due.App, start: threading.Barrier, reports: list[object]) -> None:
    start.wait(10)
    try:
        reports.append(app.sync_schedules())
    except Exception as error:
        reports.append(error)


def test_workers_starting_together_sync_the_same_schedules_once(
    app: due.App, backend_url: str
) -> None:
    """A fleet starts many workers at once, each syncing the code's schedules."""
    apps = []
    for _ in range(4):
        other = due.App(backend_url, clock=app.clock)
        other.tasks.add(app.tasks.get("report"))
        apps.append(other)
    try:
        for round_number in range(5):
            for other in apps:
                other.defined_schedules.clear()
                other.schedule(f"nightly-{round_number}", "0 3 * * *", task="report")
            start = threading.Barrier(len(apps))
            reports: list[object] = []
            threads = [
                threading.Thread(target=sync_at, args=(other, start, reports)) for other in apps
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            failures = [r for r in reports if isinstance(r, Exception)]
            assert not failures, failures
            added = [r.added for r in reports]  # type: ignore[attr-defined]
            assert sorted(added, key=len) == [[], [], [], [f"nightly-{round_number}"]]
    finally:
        for other in apps:
            other.close()
