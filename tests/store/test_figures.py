"""Counts and durations from the rollups, on every backend: every way a job ends
is counted once, in the transaction that records it, and no figure changes
when finished jobs are pruned or old rows are folded."""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import timedelta

import psycopg
import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core import stats as core_stats
from due.core.jobs import AttemptError
from due.core.records import (
    ClaimRequest,
    Completion,
    Lease,
    Retention,
    UnknownTaskSweep,
    WorkerRegistration,
)
from due.core.stats import DURATION_BUCKETS, TaskFigures
from due.store.sqlite.backend import path_from_url
from due.store.stats import HOURS_KEPT, MINUTES_KEPT
from due.testing import drain
from tests.conftest import START

LEASE = 10.0


@pytest.fixture
def work(app: due.App) -> due.Task:
    @app.task(name="work", retry=due.Retry(max_attempts=2, backoff=1))
    def work(n: int = 0) -> None: ...

    return work


def claim(app: due.App, limit: int = 1) -> list:
    return app.store.job_claim(ClaimRequest("default", limit, "w", LEASE))


def figures_of(app: due.App, task: str = "work") -> TaskFigures:
    (figures,) = [f for f in app.store.stats_figures() if f.task == task]
    return figures


def counts(app: due.App, window: str = "total", task: str = "work") -> dict[str, int]:
    found = figures_of(app, task).window(window).counts
    return {outcome: count for outcome, count in found.items() if count}


def end(job: object, state: JobState, seconds: float | None = None, **fields: object) -> Completion:
    error = None if state == JobState.SUCCEEDED else AttemptError(1, "boom", None, START)
    completion = Completion(
        job.id,  # type: ignore[attr-defined]
        job.lease_token,  # type: ignore[attr-defined]
        state,
        result="null",
        error=error,
        seconds=seconds,
        **fields,  # type: ignore[arg-type]
    )
    return completion


def test_every_kind_of_end_is_counted_once(app: due.App, work: due.Task, clock: FakeClock) -> None:
    for n in range(6):
        work.enqueue(n)
    a, b, c, d, e, f = claim(app, 6)
    app.store.job_complete(
        [
            end(a, JobState.SUCCEEDED, 0.003),
            end(b, JobState.SUCCEEDED, 0.2, warning="empty report"),
            end(c, JobState.FAILED, 1.5),
            end(d, JobState.QUEUED, 0.7, retry_in=60),
            end(e, JobState.CANCELLED, 0.05),
        ]
    )
    clock.advance(LEASE + 1)  # f's worker died: its lease expires
    assert app.store.job_rescue().requeued == (f.id,)
    queued = work.enqueue(9)
    app.store.job_cancel(queued.id)  # cancelled while queued
    assert counts(app) == {
        "succeeded": 1,
        "warned": 1,
        "failed": 1,
        "retried": 1,
        "cancelled": 2,
        "rescued": 1,
    }
    durations = figures_of(app).window("total").durations
    assert durations.count == 5  # the rescue and the queued cancel have no duration
    assert durations.total_seconds == pytest.approx(0.003 + 0.2 + 1.5 + 0.7 + 0.05)
    assert app.get(b.id).warning == "empty report"


def test_a_stale_write_counts_nothing(app: due.App, work: due.Task, clock: FakeClock) -> None:
    work.enqueue()
    (first,) = claim(app)
    clock.advance(LEASE + 1)
    app.store.job_rescue()
    (second,) = claim(app)
    assert app.store.job_complete([end(first, JobState.SUCCEEDED, 1.0)]) == set()
    app.store.job_complete([end(second, JobState.SUCCEEDED, 2.0)])
    assert counts(app) == {"rescued": 1, "succeeded": 1}
    assert figures_of(app).window("total").durations.total_seconds == pytest.approx(2.0)


def test_durations_fall_in_their_buckets_and_give_percentiles(app: due.App, work: due.Task) -> None:
    seconds = [0.004] * 50 + [0.3] * 45 + [7.0] * 4 + [100000.0]
    for n in range(len(seconds)):
        work.enqueue(n)
    claimed = claim(app, len(seconds))
    app.store.job_complete(
        [end(job, JobState.SUCCEEDED, s) for job, s in zip(claimed, seconds, strict=True)]
    )
    window = figures_of(app).window("1h")
    assert window.percentiles() == {"p50": 0.005, "p95": 0.5, "p99": 10.0}
    assert window.durations.counts[-1] == 1  # past the last bound
    assert window.durations.counts[DURATION_BUCKETS.index(0.5)] == 45


def test_unknown_tasks_the_job_transaction_and_parents_are_counted(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="writes")
    def writes(ctx: due.Context) -> None:
        with ctx.transaction():
            pass

    @app.task(name="piece")
    def piece(n: int) -> None: ...

    writes.enqueue()
    with due.App(app.url, clock=clock) as newer:  # a deploy this app has not seen

        @newer.task(name="from.the.future")
        def future() -> None: ...

        future.enqueue()
    parent = app.batch(piece, [(1,), (2,)])
    drain(app, queues=["default"])
    clock.advance("2h")
    app.store.job_fail_unknown_tasks(UnknownTaskSweep(["default"], ["writes", "piece"], 3600))
    assert counts(app, task="writes") == {"succeeded": 1}
    assert counts(app, task="piece") == {"succeeded": 2}
    assert counts(app, task="due.batch") == {"succeeded": 1}  # the parent, when it settled
    assert counts(app, task="from.the.future") == {"failed": 1}
    assert app.get(parent.id).state == JobState.SUCCEEDED


def test_windows_move_with_time_and_totals_survive_folding_and_pruning(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    for n in range(3):
        work.enqueue(n)
    app.store.job_complete([end(job, JobState.SUCCEEDED, 0.1) for job in claim(app, 3)])
    work.enqueue(3)
    (failed,) = claim(app)
    app.store.job_complete([end(failed, JobState.FAILED, 0.2)])
    assert counts(app, "5m") == {"succeeded": 3, "failed": 1}

    clock.advance("10m")
    assert counts(app, "5m") == {} and counts(app, "1h") == {"succeeded": 3, "failed": 1}
    clock.advance("3h")  # minute rows older than two hours are folded into hours
    app.store.stats_fold()
    assert counts(app, "1h") == {} and counts(app, "24h") == {"succeeded": 3, "failed": 1}
    clock.advance("3d")  # hour rows older than two days are folded into one row
    app.store.stats_fold()
    assert counts(app, "24h") == {}
    assert counts(app) == {"succeeded": 3, "failed": 1}

    work.enqueue(99)  # the newest job is never pruned: keep one younger than the rest
    deleted, _ = app.store.job_prune(Retention(succeeded=86400, failed=86400))
    assert deleted == 4
    assert counts(app) == {"succeeded": 3, "failed": 1}
    assert figures_of(app).window("total").durations.total_seconds == pytest.approx(0.5)


def stats_rows(app: due.App) -> list[tuple[str, str, str]]:
    """(span, task, outcome) of every row of the rollups table."""
    statement = "SELECT span, task, outcome FROM due_job_stats ORDER BY 1, 2, 3"
    if app.url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(path_from_url(app.url))) as conn:
            return conn.execute(statement).fetchall()
    with psycopg.connect(app.url) as conn:
        return conn.execute(statement).fetchall()  # type: ignore[return-value]


def test_old_hours_fold_into_one_row_per_key_for_all_time(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    """What core/stats.py's docstring says (it said one row per day): endings of
    two days, each folded past two days, leave one row of their key."""
    for _ in range(2):
        work.enqueue()
        app.store.job_complete([end(job, JobState.SUCCEEDED, 0.1) for job in claim(app)])
        clock.advance("3h")
        app.store.stats_fold()  # minutes into hours
        clock.advance("3d")
        app.store.stats_fold()  # hours into all time
    assert stats_rows(app) == [("all", "work", "succeeded")]
    assert counts(app) == {"succeeded": 2}
    doc = " ".join((core_stats.__doc__ or "").split())
    assert (timedelta(hours=2), timedelta(days=2)) == (MINUTES_KEPT, HOURS_KEPT)
    assert "minute rows older than two hours into one row per hour" in doc
    assert "hour rows older than two days into one row per task, queue, outcome and bucket" in doc


def test_retention_is_per_outcome(app: due.App, work: due.Task, clock: FakeClock) -> None:
    ok, bad = work.enqueue(1), work.enqueue(2)
    first, second = claim(app, 2)
    app.store.job_complete([end(first, JobState.SUCCEEDED), end(second, JobState.FAILED)])
    work.enqueue(3)  # the newest job stays whatever its age
    clock.advance("8d")
    assert app.store.job_prune(Retention()) == (1, 0)  # succeeded: 7 days; failed: 30
    assert [j.id for j in app.jobs(state="succeeded")] == []
    assert app.get(bad.id).state == JobState.FAILED
    clock.advance("23d")
    assert app.store.job_prune(Retention()) == (1, 0)
    assert not app.jobs(state="failed")
    assert ok.id != bad.id


def test_a_schedules_last_success_outlives_its_jobs(app: due.App, clock: FakeClock) -> None:
    @app.task(name="nightly")
    def nightly() -> None: ...

    app.add_schedule("nightly", every="1h", task=nightly)
    clock.advance("1h")
    run = app.trigger_schedule("nightly")
    drain(app)
    (overview,) = app.schedules()
    assert overview.last_success_at == clock.now()
    assert app.get(run.id).state == JobState.SUCCEEDED
    app.enqueue("nightly")  # (the newest job is never pruned)
    clock.advance("8d")
    app.store.job_prune(Retention())
    (overview,) = app.schedules()
    assert overview.last_success_at == START + timedelta(hours=1)


def test_recent_failures_counts_jobs_failed_for_good_within_the_window(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    work.enqueue(1)
    (old,) = claim(app)
    app.store.job_complete([end(old, JobState.FAILED, 0.1)])
    clock.advance("2h")
    since = clock.now() - timedelta(hours=1)
    work.enqueue(2), work.enqueue(3)
    a, b = claim(app, 2)
    app.store.job_complete(
        [end(a, JobState.FAILED, 0.1), end(b, JobState.QUEUED, 0.1, retry_in=60)]
    )
    (row,) = app.store.job_recent_failures(since)
    assert (row["queue"], row["task"], row["failed"]) == ("default", "work", 1)


def test_live_workers_per_queue_and_running_jobs_per_worker(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    app.store.worker_register(WorkerRegistration("w", "host", 1, {"default": 4, "emails": 2}))
    app.store.worker_register(WorkerRegistration("v", "host", 2, {"default": 4}))
    for n in range(3):
        work.enqueue(n)
    claim(app, 2)
    assert app.store.worker_running_counts() == {"w": 2}
    assert app.store.worker_live_by_queue(60) == {"default": 2, "emails": 1}
    clock.advance("2m")
    app.store.worker_touch("v")
    assert app.store.worker_live_by_queue(60) == {"default": 1}


def test_schedule_runs_since_lists_the_recorded_runs_of_a_window_oldest_first(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    app.add_schedule("tick", "* * * * *", task=work)
    first = app.trigger_schedule("tick")
    clock.advance("10m")
    second = app.trigger_schedule("tick")
    runs = app.store.schedule_runs_since("tick", clock.now() - timedelta(minutes=20))
    assert [run.job_id for run in runs] == [first.id, second.id]
    recent = app.store.schedule_runs_since("tick", clock.now() - timedelta(minutes=5))
    assert [run.job_id for run in recent] == [second.id]


def test_a_job_released_after_a_cancel_request_is_counted_cancelled_and_one_handed_back_is_not(
    app: due.App, work: due.Task
) -> None:
    work.enqueue(1), work.enqueue(2)
    asked, other = claim(app, 2)
    app.store.job_cancel(asked.id)  # running: asked to stop
    leases = [Lease(job.id, job.lease_token, LEASE) for job in (asked, other)]
    assert app.store.job_release(leases, "worker stopping") == {asked.id, other.id}
    assert app.get(asked.id).state == JobState.CANCELLED
    assert app.get(other.id).state == JobState.QUEUED
    assert counts(app) == {"cancelled": 1}
