"""Every duration a user gives is bounded (durations.MAX_SECONDS, 100 years) and
refused at the call, naming the option and the maximum: none reaches the
database as a time it cannot hold. `unique_for=1e13` was accepted, and on
PostgreSQL every later enqueue with its key, and every prune (for every job),
failed with `timestamp out of range`."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

import due
from due.clock import FakeClock
from due.core.records import ClaimRequest, Completion, Retention
from due.durations import MAX_SECONDS
from due.maintenance.pruner import Pruner
from due.worker.calls import StoreCalls
from due.worker.settings import WorkerSettings

CENTURY = "more than 100 years"
OVERLONG: list[Any] = [1e13, dt.timedelta(days=999_999_999), f"{MAX_SECONDS + 1}s"]


@pytest.fixture
def digest(app: due.App) -> due.Task:
    @app.task(name="digest")
    def digest(day: int) -> None: ...

    return digest


def finish(app: due.App, count: int) -> None:
    claimed = app.store.job_claim(ClaimRequest("default", count, "w", 30))
    app.store.job_complete(
        [Completion(job.id, job.lease_token, due.JobState.SUCCEEDED, "null") for job in claimed]
    )


@pytest.mark.parametrize("overlong", OVERLONG)
def test_an_overlong_unique_for_is_refused_at_the_enqueue(
    app: due.App, digest: due.Task, overlong: Any
) -> None:
    enqueues: list[Callable[[], Any]] = [
        lambda: digest.options(key="d:1", unique_for=overlong).enqueue(1),
        lambda: app.enqueue("digest", [1], key="d:1", unique_for=overlong),
        lambda: app.enqueue_many([digest.options(key="d:1", unique_for=overlong).request(1)]),
    ]
    for enqueue in enqueues:
        with pytest.raises(due.InvalidJobError, match=f"'digest': unique_for of .*{CENTURY}"):
            enqueue()
    with pytest.raises(due.ConfigurationError, match=f"task 'long': unique_for of .*{CENTURY}"):
        app.task(name="long", unique_for=overlong)(lambda: None)
    assert app.jobs() == []


def test_the_pruner_and_the_key_work_on_beside_the_longest_unique_for(
    app: due.App, digest: due.Task, clock: FakeClock
) -> None:
    """At the bound itself, the key's window ends a century after its job: the
    enqueue with the key and the prune both compute it, on both stores."""
    longest = digest.options(key="d:1", unique_for=MAX_SECONDS).enqueue(1)
    app.enqueue_many([digest.request(n) for n in range(2, 6)])
    finish(app, 5)
    clock.advance("2d")
    newest = digest.enqueue(6)  # never pruned: its id is the high-water mark
    pruner = Pruner(
        store=app.store,
        call=StoreCalls(1, "pruner"),
        leading=lambda: True,
        retention=Retention(succeeded=86400, failed=86400),
    )
    assert asyncio.run(pruner.run_once()) == (4, 0)  # all but the key's job and the newest
    assert {job.id for job in app.jobs()} == {longest.id, newest.id}
    again = digest.options(key="d:1").enqueue(1)
    assert again.deduplicated and again.id == longest.id
    with pytest.raises(due.InvalidJobError, match=CENTURY):
        digest.options(key="d:2", unique_for=1e13).enqueue(2)
    assert asyncio.run(pruner.run_once()) == (0, 0)  # and the next round runs too


@pytest.mark.parametrize(
    ("option", "what"),
    [("timeout", "timeout"), ("lease", "lease"), ("stuck_after", "stuck_after")],
)
def test_a_tasks_overlong_durations_are_refused_at_definition(
    app: due.App, option: str, what: str
) -> None:
    with pytest.raises(due.ConfigurationError, match=f"task 'slow': {what} of 1000.* {CENTURY}"):
        app.task(name="slow", **{option: 1e13})(lambda: None)


@pytest.mark.parametrize(
    ("option", "what"),
    [
        ("lease", "worker lease"),
        ("grace", "worker grace"),
        ("unknown_task_grace", "unknown task grace"),
        ("retention", "retention"),
        ("retention_succeeded", "retention of succeeded jobs"),
        ("retention_failed", "retention of failed and cancelled jobs"),
        ("leader_ttl", "leader lease ttl"),
    ],
)
def test_a_workers_overlong_durations_are_refused_at_construction(option: str, what: str) -> None:
    with pytest.raises(due.ConfigurationError, match=f"^{what} of '.*' is {CENTURY}"):
        WorkerSettings.build({"default": 1}, **{option: "1200000d"})


def test_the_other_overlong_durations_are_refused_at_the_call(
    app: due.App, digest: due.Task
) -> None:
    job = digest.enqueue(1)
    calls: list[tuple[Callable[[], Any], str]] = [
        (lambda: app.wait(job.id, timeout=1e13), "wait timeout"),
        (lambda: asyncio.run(app.await_job(job.id, timeout=1e13)), "wait timeout"),
        (lambda: due.Retry(backoff=1e13), r"Retry\(backoff=...\)"),
        (lambda: due.Retry(max_delay=1e13), r"Retry\(max_delay=...\)"),
        (lambda: digest.options(delay=1e13).enqueue(1), "'digest': delay"),
        (lambda: app.check(failures_window=1e13), "failures window"),
        (lambda: app.queue("default", oldest_due_warning=1e13), "oldest_due_warning"),
    ]
    for call, what in calls:
        with pytest.raises(due.DueError, match=f"{what} of .*{CENTURY}"):
            call()
    assert [j.id for j in app.jobs()] == [job.id]


def test_a_retry_delay_past_the_bound_is_the_cap() -> None:
    """Clamped, not refused: the doubling passes any cap after enough attempts,
    and a backoff function's result is seen only once an attempt has failed."""
    doubling = due.Retry(backoff=MAX_SECONDS, max_delay=MAX_SECONDS, jitter=0.25)
    assert doubling.delay(2) == doubling.delay(5_000) == MAX_SECONDS
    for result in (1e13, dt.timedelta(days=999_999_999), "1200000d"):
        function = due.Retry(backoff=lambda attempt, r=result: r, max_delay="1h")
        assert function.delay(3) == 3600
    with pytest.raises(due.ConfigurationError, match="from 1 to 1,000,000"):
        due.Retry(max_attempts=2**40)
