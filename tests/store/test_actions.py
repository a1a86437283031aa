"""Actions by hand and the per-minute throughput, on every backend: what the
dashboard shows beside a job's attempts and on its overview."""

from __future__ import annotations

from datetime import timedelta

import pytest

import due
from due.clock import FakeClock
from due.core.records import ClaimRequest, Completion, Retention


@pytest.fixture
def work(app: due.App) -> due.Task:
    @app.task(name="work", queue="emails")
    def work(n: int = 0) -> None: ...

    return work


def test_actions_are_kept_per_job_schedule_and_queue_oldest_first(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    job = work.enqueue()
    app.store.action_record("cancel", "ann", job_id=job.id)
    clock.advance("1m")
    app.store.action_record("retry", "bob", job_id=job.id)
    app.store.action_record("pause", "cy", queue="emails")
    app.store.action_record("trigger", "dee", schedule="nightly", job_id=job.id + 1)
    history = app.store.action_history(job_id=job.id)
    assert [(a.action, a.by) for a in history] == [("cancel", "ann"), ("retry", "bob")]
    assert history[1].at - history[0].at == timedelta(minutes=1)
    assert [a.action for a in app.store.action_history(queue="emails")] == ["pause"]
    (trigger,) = app.store.action_history(schedule="nightly")
    assert trigger.job_id == job.id + 1 and trigger.by == "dee"
    assert [a.by for a in app.store.action_history(job_id=job.id, limit=1)] == ["bob"]


def test_actions_are_pruned_with_the_failed_jobs(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    job = work.enqueue()
    app.store.action_record("pause", "ann", queue="emails")
    clock.advance("31d")
    app.store.action_record("resume", "ann", queue="emails")
    app.store.job_prune(Retention(7 * 86400, 30 * 86400))
    assert [a.action for a in app.store.action_history(queue="emails")] == ["resume"]
    assert job.id


def test_throughput_counts_ends_per_queue_and_minute(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    for n in range(3):
        work.enqueue(n)
    claimed = app.store.job_claim(ClaimRequest("emails", 3, "w", 30))
    app.store.job_complete(
        [Completion(claimed[0].id, claimed[0].lease_token, due.JobState.SUCCEEDED)]
    )
    clock.advance("2m")
    done = [Completion(c.id, c.lease_token, due.JobState.SUCCEEDED) for c in claimed[1:]]
    app.store.job_complete(done)
    per_minute = app.store.stats_throughput(clock.now(), 5)["emails"]
    assert per_minute == [0, 0, 1, 0, 2]
    assert app.store.stats_throughput(clock.now() + timedelta(hours=2), 5) == {}
