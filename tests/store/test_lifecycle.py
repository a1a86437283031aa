"""The job life cycle, on every backend: enqueue, claim, complete, fail, retry."""

from __future__ import annotations

import json
from datetime import timedelta, timezone

import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.jobs import AttemptError
from due.core.records import ClaimRequest, Completion
from due.testing import drain
from tests.conftest import START

WORKER = "worker-1"
LEASE = 30.0


@pytest.fixture
def noop(app: due.App) -> due.Task:
    @app.task(name="noop")
    def noop(value: object = None) -> object:
        return value

    return noop


def claim(app: due.App, queue: str = "default", limit: int = 10, **options: object) -> list:
    return app.store.job_claim(
        ClaimRequest(queue, limit, options.pop("worker", WORKER), LEASE, **options)
    )


def succeed(app: due.App, job_id: int, token: int, result: object = None) -> set[int]:
    completion = Completion(job_id, token, JobState.SUCCEEDED, result=json.dumps(result))
    return app.store.job_complete([completion])


def error(attempt: int, text: str = "boom") -> AttemptError:
    return AttemptError(attempt, text, "Traceback ...", START)


def test_enqueued_job_is_stored_and_queued(app: due.App, noop: due.Task) -> None:
    job = noop.options(priority=3).enqueue({"user": 42})
    assert job.id > 0 and job.state == JobState.QUEUED and not job.deduplicated
    stored = app.get(job.id)
    assert stored.task == "noop" and stored.queue == "default" and stored.priority == 3
    assert stored.args == ({"user": 42},) and stored.kwargs == {}
    assert stored.run_at == START and stored.created_at == START
    assert stored.attempt == 0 and stored.state == JobState.QUEUED


def test_claim_leases_the_job_to_one_worker(app: due.App, noop: due.Task) -> None:
    job = noop.enqueue(value=7)
    (claimed,) = claim(app)
    assert claimed.id == job.id and claimed.kwargs == {"value": 7}
    assert claimed.attempt == 1 and claimed.lease_token == 1
    assert claimed.lease_expires_at == START + timedelta(seconds=LEASE)
    running = app.get(job.id)
    assert running.state == JobState.RUNNING and running.worker == WORKER
    assert running.started_at == START
    assert claim(app, worker="worker-2") == []


def test_success_records_result_and_ends_the_lease(
    app: due.App, noop: due.Task, clock: FakeClock
) -> None:
    job = noop.enqueue()
    (claimed,) = claim(app)
    clock.advance("2s")
    assert succeed(app, job.id, claimed.lease_token, {"sent": True}) == {job.id}
    done = app.get(job.id)
    assert done.state == JobState.SUCCEEDED and done.result == {"sent": True}
    assert done.finished_at == START + timedelta(seconds=2)
    assert done.lease_expires_at is None
    assert claim(app) == []


def test_delayed_job_is_not_claimable_before_run_at(
    app: due.App, noop: due.Task, clock: FakeClock
) -> None:
    job = noop.options(delay="10m").enqueue()
    assert job.run_at == START + timedelta(minutes=10)
    assert claim(app) == []
    clock.advance("9m59s")
    assert claim(app) == []
    clock.advance("1s")
    assert [c.id for c in claim(app)] == [job.id]


def test_run_at_sets_an_absolute_due_time(app: due.App, noop: due.Task, clock: FakeClock) -> None:
    job = noop.options(run_at=START + timedelta(hours=2)).enqueue()
    assert app.get(job.id).run_at == START + timedelta(hours=2)
    clock.advance("1h")
    assert claim(app) == []
    clock.advance("1h")
    assert [c.id for c in claim(app)] == [job.id]


def test_higher_priority_is_claimed_first(app: due.App, noop: due.Task) -> None:
    low = noop.options(priority=-5).enqueue("low")
    high = noop.options(priority=10).enqueue("high")
    middle = noop.enqueue("middle")
    assert [c.id for c in claim(app, limit=1)] == [high.id]
    assert [c.id for c in claim(app, limit=5)] == [middle.id, low.id]


def test_within_a_priority_the_earliest_due_runs_first(
    app: due.App, noop: due.Task, clock: FakeClock
) -> None:
    later = noop.options(delay="2s").enqueue("later")
    earlier = noop.options(delay="1s").enqueue("earlier")
    first = noop.enqueue("first")
    clock.advance("5s")
    assert [c.id for c in claim(app)] == [first.id, earlier.id, later.id]


def test_claim_takes_only_its_queue_and_known_tasks(app: due.App, noop: due.Task) -> None:
    @app.task(name="other")
    def other() -> None: ...

    elsewhere = noop.options(queue="bulk").enqueue()
    unknown_here = other.enqueue()
    known = noop.enqueue()
    assert [c.id for c in claim(app, tasks=["noop"])] == [known.id]
    assert [c.id for c in claim(app, queue="bulk")] == [elsewhere.id]
    assert [c.id for c in claim(app)] == [unknown_here.id]


def test_claim_honours_the_batch_limit_and_task_leases(app: due.App, noop: due.Task) -> None:
    ids = [noop.enqueue(i).id for i in range(5)]
    first = claim(app, limit=2, task_leases={"noop": 12.0})
    assert [c.id for c in first] == ids[:2]
    assert {c.lease_expires_at for c in first} == {START + timedelta(seconds=12)}
    assert [c.id for c in claim(app, limit=10)] == ids[2:]


def test_failed_attempt_with_attempts_left_waits_for_its_backoff(
    app: due.App, noop: due.Task, clock: FakeClock
) -> None:
    job = noop.enqueue()
    (first,) = claim(app)
    retry = Completion(job.id, 1, JobState.QUEUED, error=error(1, "ValueError: x"), retry_in=5)
    assert app.store.job_complete([retry]) == {job.id}
    waiting = app.get(job.id)
    assert waiting.state == JobState.QUEUED and waiting.run_at == START + timedelta(seconds=5)
    assert waiting.last_error == "ValueError: x" and len(waiting.errors) == 1
    assert waiting.errors[0].traceback == "Traceback ..."
    assert claim(app) == []
    clock.advance("5s")
    (second,) = claim(app)
    assert second.attempt == 2 and second.lease_token > first.lease_token


def test_terminal_failure_keeps_the_error_of_every_attempt(app: due.App, clock: FakeClock) -> None:
    calls = []

    @app.task(name="flaky", retry=due.Retry(max_attempts=3, backoff=1, jitter=0))
    def flaky(n: int) -> None:
        calls.append(n)
        raise RuntimeError(f"attempt {len(calls)} failed")

    job = flaky.enqueue(1)
    for _ in range(3):
        drain(app)
        clock.advance("1h")
    failed = app.get(job.id)
    assert failed.state == JobState.FAILED and failed.attempt == 3 and len(calls) == 3
    assert [e.attempt for e in failed.errors] == [1, 2, 3]
    assert [e.error for e in failed.errors] == [
        f"RuntimeError: attempt {n} failed" for n in (1, 2, 3)
    ]
    assert all("RuntimeError" in (e.traceback or "") for e in failed.errors)
    assert failed.last_error == "RuntimeError: attempt 3 failed"
    assert failed.finished_at is not None


def test_retries_wait_exponentially_longer(app: due.App, clock: FakeClock) -> None:
    @app.task(name="down", retry=due.Retry(max_attempts=4, backoff=10, jitter=0))
    def down() -> None:
        raise ConnectionError("service down")

    job = down.enqueue()
    due_times = []
    for _ in range(3):
        drain(app)
        waiting = app.get(job.id)
        due_times.append((waiting.run_at - clock.now()).total_seconds())
        clock.set(waiting.run_at)
    assert due_times == [10, 20, 40]


def test_discard_on_fails_at_once_and_retry_on_limits_retries(app: due.App) -> None:
    @app.task(name="strict", retry=due.Retry(discard_on=KeyError, retry_on=ConnectionError))
    def strict(kind: str) -> None:
        raise {"key": KeyError("k"), "conn": ConnectionError("c"), "value": ValueError("v")}[kind]

    discarded, retried, not_retried = (
        strict.enqueue("key"),
        strict.enqueue("conn"),
        strict.enqueue("value"),
    )
    drain(app)
    assert app.get(discarded.id).state == JobState.FAILED
    assert app.get(retried.id).state == JobState.QUEUED
    assert app.get(not_retried.id).state == JobState.FAILED


def test_cancel_a_queued_or_delayed_job(app: due.App, noop: due.Task, clock: FakeClock) -> None:
    now_job, later_job = noop.enqueue(), noop.options(delay="1h").enqueue()
    assert app.cancel(now_job.id).state == JobState.CANCELLED
    assert app.cancel(later_job.id).state == JobState.CANCELLED
    clock.advance("2h")
    assert claim(app) == []
    assert app.get(later_job.id).finished_at == START


def test_cancel_and_retry_refuse_the_wrong_states(app: due.App, noop: due.Task) -> None:
    job = noop.enqueue()
    (claimed,) = claim(app)
    with pytest.raises(due.InvalidStateError, match="only a failed or cancelled"):
        app.retry(job.id)
    succeed(app, job.id, claimed.lease_token)
    with pytest.raises(due.InvalidStateError, match="it is succeeded"):
        app.retry(job.id)
    with pytest.raises(due.InvalidStateError, match="it is succeeded; a job that has ended"):
        app.cancel(job.id)
    with pytest.raises(due.JobNotFoundError):
        app.cancel(987654)
    with pytest.raises(due.JobNotFoundError):
        app.get(987654)


def test_retry_gives_a_failed_job_a_fresh_set_of_attempts(app: due.App, clock: FakeClock) -> None:
    outcomes = iter([RuntimeError("deploy pending"), None])

    @app.task(name="after_deploy", retry=due.Retry(max_attempts=1))
    def after_deploy() -> str:
        failure = next(outcomes)
        if failure:
            raise failure
        return "done"

    job = after_deploy.enqueue()
    drain(app)
    assert app.get(job.id).state == JobState.FAILED
    clock.advance("1m")
    retried = app.retry(job.id)
    assert retried.state == JobState.QUEUED and retried.attempt == 0
    assert retried.run_at == START + timedelta(minutes=1)
    drain(app)
    final = app.get(job.id)
    assert final.state == JobState.SUCCEEDED and final.result == "done"
    assert len(final.errors) == 1  # the history of the failed run is kept


def test_retry_a_cancelled_job(app: due.App, noop: due.Task) -> None:
    job = noop.enqueue()
    app.cancel(job.id)
    assert app.retry(job.id).state == JobState.QUEUED
    assert [c.id for c in claim(app)] == [job.id]


def test_jobs_lists_with_filters_newest_first(app: due.App, noop: due.Task) -> None:
    a = noop.options(queue="emails").enqueue()
    b = noop.options(delay="1d").enqueue()
    c = noop.enqueue()
    app.cancel(c.id)
    assert [j.id for j in app.jobs()] == [c.id, b.id, a.id]
    assert [j.id for j in app.jobs(queue="emails")] == [a.id]
    assert [j.id for j in app.jobs(state="queued")] == [b.id, a.id]
    assert [j.id for j in app.jobs(state=JobState.CANCELLED)] == [c.id]
    assert [j.id for j in app.jobs(task="noop", limit=1)] == [c.id]
    assert app.jobs(task="nothing") == []
    with pytest.raises(due.ConfigurationError, match="unknown job state"):
        app.jobs(state="done")


def test_enqueue_many_inserts_all_in_order(app: due.App, noop: due.Task, clock: FakeClock) -> None:
    requests = [noop.options(priority=i % 3).request(i) for i in range(2500)]
    requests.append(noop.options(delay="1h", queue="bulk").request("later"))
    jobs = app.enqueue_many(requests)
    assert [j.args for j in jobs] == [r.args for r in requests]
    assert len({j.id for j in jobs}) == len(requests)
    assert app.get(jobs[7].id).args == (7,) and app.get(jobs[7].id).priority == 1
    assert app.get(jobs[-1].id).run_at == START + timedelta(hours=1)
    assert len(claim(app, limit=5000)) == 2500


def test_a_due_time_comes_back_in_utc_whichever_zone_it_was_given_in(
    app: due.App, noop: due.Task
) -> None:
    """As the store gives it back (`app.get`), alone or in a batch."""
    later = (START + timedelta(hours=3)).astimezone(timezone(timedelta(hours=2)))
    alone = noop.options(run_at=later).enqueue(1)
    batch = app.enqueue_many([noop.options(run_at=later).request(2), noop.request(3)])
    for job in (alone, batch[0]):
        assert job.run_at == later and job.run_at.utcoffset() == timedelta(0)
        assert app.get(job.id).run_at.utcoffset() == timedelta(0)


def test_queue_and_priority_override_the_task_defaults(app: due.App) -> None:
    @app.task(name="bulk_task", queue="bulk", priority=2)
    def bulk_task() -> None: ...

    default = bulk_task.enqueue()
    moved = bulk_task.options(queue="urgent", priority=9).enqueue()
    assert (default.queue, default.priority) == ("bulk", 2)
    assert (app.get(moved.id).queue, app.get(moved.id).priority) == ("urgent", 9)


def test_store_clock_is_the_injected_clock(app: due.App, clock: FakeClock) -> None:
    assert app.store.now() == START
    clock.advance("90s")
    assert app.store.now() == START + timedelta(seconds=90)


def test_database_clock_is_used_without_an_injected_clock(backend_url: str) -> None:
    real = due.App(backend_url)
    real.migrate()

    @real.task(name="noop")
    def noop() -> None: ...

    try:
        job = noop.enqueue()
        assert abs((job.created_at - real.store.now()).total_seconds()) < 60
        assert job.created_at.year >= 2026
    finally:
        real.close()
