"""Idempotency keys: one job per key while it is active (or unique_for after success)."""

from __future__ import annotations

import json

import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.records import ClaimRequest, Completion, Retention
from due.testing import drain


@pytest.fixture
def reset(app: due.App) -> due.Task:
    @app.task(name="reset_email")
    def reset_email(user: int) -> None: ...

    return reset_email


def test_same_key_returns_the_existing_job(app: due.App, reset: due.Task) -> None:
    first = reset.options(key="reset:42", delay="1h").enqueue(42)
    second = reset.options(key="reset:42").enqueue(42)
    other = reset.options(key="reset:43").enqueue(43)
    assert second.id == first.id and second.deduplicated and not first.deduplicated
    assert second.run_at == first.run_at  # the stored job, not the new request
    assert other.id != first.id and not other.deduplicated
    assert len(app.jobs()) == 2


def test_a_running_job_still_holds_its_key(app: due.App, reset: due.Task) -> None:
    first = reset.options(key="k").enqueue(1)
    app.store.job_claim(ClaimRequest("default", 1, "w", 10))
    assert reset.options(key="k").enqueue(1).id == first.id


def test_success_releases_the_key_without_unique_for(app: due.App, reset: due.Task) -> None:
    first = reset.options(key="k").enqueue(1)
    drain(app)
    second = reset.options(key="k").enqueue(1)
    assert second.id != first.id and not second.deduplicated


def test_unique_for_keeps_deduplicating_after_success(app: due.App, clock: FakeClock) -> None:
    @app.task(name="digest", unique_for="1h")
    def digest() -> None: ...

    first = digest.options(key="digest:today").enqueue()
    drain(app)
    clock.advance("59m")
    assert digest.options(key="digest:today").enqueue().id == first.id
    clock.advance("2m")
    later = digest.options(key="digest:today").enqueue()
    assert later.id != first.id and later.state == JobState.QUEUED


def test_cancel_and_failure_release_the_key(app: due.App, reset: due.Task) -> None:
    cancelled = reset.options(key="k").enqueue(1)
    app.cancel(cancelled.id)
    failing = reset.options(key="k").enqueue(1)
    assert failing.id != cancelled.id
    (claimed,) = app.store.job_claim(ClaimRequest("default", 1, "w", 10))
    app.store.job_complete([Completion(failing.id, claimed.lease_token, JobState.FAILED)])
    assert reset.options(key="k").enqueue(1).id not in (cancelled.id, failing.id)


def test_keys_in_a_batch_deduplicate_against_the_store_and_each_other(
    app: due.App, reset: due.Task
) -> None:
    existing = reset.options(key="a").enqueue(0)
    jobs = app.enqueue_many(
        [
            reset.options(key="a").request(1),
            reset.options(key="b").request(2),
            reset.options(key="b").request(3),
            reset.request(4),
        ]
    )
    assert jobs[0].id == existing.id and jobs[0].deduplicated
    assert jobs[2].id == jobs[1].id and jobs[2].deduplicated and not jobs[1].deduplicated
    assert not jobs[3].deduplicated
    assert len(app.jobs()) == 3


def test_a_key_is_bound_as_data_never_as_sql(app: due.App, reset: due.Task) -> None:
    hostile = "x'; DROP TABLE due_jobs; --"
    first = reset.options(key=hostile).enqueue(1)
    assert reset.options(key=hostile).enqueue(1).id == first.id
    assert app.get(first.id).key == hostile


def test_the_stored_key_is_shown_on_the_job(app: due.App, reset: due.Task) -> None:
    job = reset.options(key="reset:5").enqueue(5)
    assert app.get(job.id).key == "reset:5"
    assert json.loads(json.dumps(app.get(job.id).args)) == [5]


def fail(app: due.App, job_id: int) -> None:
    (claimed,) = app.store.job_claim(ClaimRequest("default", 1, "w", 10))
    assert claimed.id == job_id
    app.store.job_complete([Completion(job_id, claimed.lease_token, JobState.FAILED)])


def test_a_retried_job_takes_its_key_back(app: due.App, reset: due.Task) -> None:
    """Invariant 10: after retry, the same key deduplicates again (it did not)."""
    first = reset.options(key="k").enqueue(1)
    fail(app, first.id)
    assert app.retry(first.id).key == "k"
    again = reset.options(key="k").enqueue(1)
    assert again.id == first.id and again.deduplicated
    assert len(app.jobs()) == 1


def test_a_retry_is_refused_while_another_live_job_holds_its_key(
    app: due.App, reset: due.Task
) -> None:
    first = reset.options(key="k").enqueue(1)
    fail(app, first.id)
    second = reset.options(key="k").enqueue(1)  # the key was free: a new job took it
    assert second.id != first.id
    with pytest.raises(due.InvalidStateError, match=rf"key 'k' is held by job {second.id}"):
        app.retry(first.id)
    assert app.get(first.id).state == JobState.FAILED
    app.cancel(second.id)  # the holder ends: the key is free again
    assert app.retry(first.id).state == JobState.QUEUED
    assert reset.options(key="k").enqueue(1).id == first.id


def test_pruning_keeps_a_key_whose_unique_for_window_is_open(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="monthly", unique_for="30d")
    def monthly() -> None: ...

    first = monthly.options(key="invoice:2030-01").enqueue()
    drain(app)
    monthly.enqueue()  # a newer job, so the first is not the newest (never pruned)
    clock.advance("15d")
    app.store.job_prune(Retention(14 * 86400.0, 14 * 86400.0))
    assert app.get(first.id).state == JobState.SUCCEEDED  # its window is still open
    assert monthly.options(key="invoice:2030-01").enqueue().id == first.id
    clock.advance("16d")  # 31 days after: the window has closed
    app.store.job_prune(Retention(14 * 86400.0, 14 * 86400.0))
    with pytest.raises(due.JobNotFoundError):
        app.get(first.id)
    assert monthly.options(key="invoice:2030-01").enqueue().id != first.id


def test_held_keys_in_a_big_batch_are_settled_in_place(app: due.App, reset: due.Task) -> None:
    """Keys held by stored jobs, and keys repeated within the batch, in every
    statement of it: each request gets the job that holds its key, in order."""
    held = {n: reset.options(key=f"k{n}").enqueue(-n) for n in range(0, 600, 97)}
    requests = [reset.options(key=f"k{n % 450}").request(n) for n in range(600)]
    jobs = app.enqueue_many(requests)
    assert len(jobs) == 600
    for n, job in enumerate(jobs):
        first = n % 450
        if first in held:
            assert job.id == held[first].id and job.deduplicated
        elif n >= 450:
            assert job.id == jobs[first].id and job.deduplicated
        else:
            assert not job.deduplicated and app.get(job.id).args == (n,)
    new_keys = 450 - len([n for n in held if n < 450])
    assert len(app.jobs(limit=1000)) == len(held) + new_keys
