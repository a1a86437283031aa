"""Limited jobs that no running code can run as they are, on a real SQLite file
and a real PostgreSQL: a job of a task no live worker knows is failed after the
grace like any other, and a job whose task no longer names a limit in the code
of the worker that sweeps (the limit was taken out) loses it and runs."""

from __future__ import annotations

import json

import pytest

import due
from due.clock import FakeClock
from due.core.jobs import JobState
from due.core.records import ClaimRequest, UnknownTaskSweep, WorkerRegistration
from tests.helpers.database import rows


@pytest.fixture
def before(app: due.App) -> dict[str, due.Task]:
    """The code the jobs were enqueued by: `export` counts against `exports`,
    `sync` against `exports` and per account against `accounts`."""
    app.limit("exports", concurrency=1)
    app.limit("accounts", concurrency=1)

    @app.task(name="export", limits=["exports"])
    def export(n: int) -> None: ...

    @app.task(name="sync", limits={"exports": None, "accounts": lambda account: account})
    def sync(account: str) -> None: ...

    @app.task(name="gone", limits=["exports"])
    def gone() -> None: ...

    app.sync_limits()
    return {"export": export, "sync": sync, "gone": gone}


def sweep_of(
    worker: str, task_limits: dict[str, list[str]], grace: float = 3600
) -> UnknownTaskSweep:
    return UnknownTaskSweep(
        ["default"], list(task_limits), grace, task_limits=task_limits, worker=worker
    )


def start_worker(app: due.App, worker: str, tasks: list[str]) -> None:
    app.store.worker_register(WorkerRegistration(worker, "host", 1, {"default": 4}, tasks))


def limits_of(app: due.App, job_id: int) -> str | None:
    """A job's limits as JSON text, compact (PostgreSQL reads them as a list)."""
    value = rows(app.url, f"SELECT limits FROM due_jobs WHERE id = {job_id}")[0][0]
    if value is None:
        return None
    return json.dumps(json.loads(value) if isinstance(value, str) else value, separators=(",", ":"))


def test_a_limited_job_of_a_task_no_live_worker_knows_is_failed_after_the_grace(
    app: due.App, before: dict[str, due.Task], clock: FakeClock
) -> None:
    """The sweep read the claim index only, which holds no limited job: a
    limited job of a removed task stayed queued for ever."""
    job = before["gone"].enqueue().id
    start_worker(app, "w:1:a", ["export", "sync"])
    clock.advance("2h")
    app.store.worker_touch("w:1:a")
    swept = app.store.job_fail_unknown_tasks(UnknownTaskSweep(["default"], ["export"], 3600))
    assert swept.failed == [job]
    assert app.get(job).state == JobState.FAILED
    assert "unknown task gone" in (app.get(job).last_error or "")


def test_a_job_loses_the_limit_its_task_no_longer_names(
    app: due.App, before: dict[str, due.Task], clock: FakeClock
) -> None:
    """A release takes `exports` out of the code (the worker's app declares no
    limit): the jobs enqueued before it no longer count against it, at once,
    and run; a limit the task still names stays."""
    whole = before["export"].enqueue(1).id
    both = before["sync"].enqueue("acct-1").id
    clock.advance("1s")
    start_worker(app, "w:1:a", ["export", "sync"])  # the new code starts after them
    swept = app.store.job_fail_unknown_tasks(
        sweep_of("w:1:a", {"export": [], "sync": ["accounts"]})
    )
    assert swept.limits_dropped == sorted([whole, both])
    assert limits_of(app, whole) is None
    assert limits_of(app, both) == '[["accounts","acct-1"]]'
    history = app.get(whole).errors[-1]
    assert history.kind == "limits_dropped" and "limit exports" in history.error
    # A worker that knows no limit claims the one that counts against none now.
    plain = app.store.job_claim(ClaimRequest("default", 10, "w:1:a", 30))
    assert [job.id for job in plain] == [whole]


def test_a_job_enqueued_since_the_worker_started_keeps_its_limit_for_the_grace(
    app: due.App, before: dict[str, due.Task], clock: FakeClock
) -> None:
    """During a deploy, older code may enqueue jobs with the limit after a new
    worker started, and older workers enforce it: they keep it for the grace."""
    start_worker(app, "w:1:a", ["export"])
    clock.advance("1s")
    job = before["export"].enqueue(1).id
    clock.advance("10m")
    app.store.worker_touch("w:1:a")
    sweep = sweep_of("w:1:a", {"export": []})
    assert app.store.job_fail_unknown_tasks(sweep).limits_dropped == []
    clock.advance("1h")
    app.store.worker_touch("w:1:a")
    assert app.store.job_fail_unknown_tasks(sweep).limits_dropped == [job]


def test_a_job_waiting_for_a_limit_taken_out_waits_no_more(
    app: due.App, before: dict[str, due.Task], clock: FakeClock
) -> None:
    export = before["export"]
    first, second = export.enqueue(1).id, export.enqueue(2).id
    limited = ClaimRequest("default", 10, "old", 30, limited=True)
    assert [job.id for job in app.store.job_claim(limited)] == [first]
    assert rows(app.url, f"SELECT limit_wait FROM due_jobs WHERE id = {second}") == [("exports",)]
    clock.advance("1s")
    start_worker(app, "w:1:a", ["export"])
    swept = app.store.job_fail_unknown_tasks(sweep_of("w:1:a", {"export": []}))
    assert swept.limits_dropped == [second]
    assert rows(app.url, f"SELECT limit_wait FROM due_jobs WHERE id = {second}") == [(None,)]
    plain = app.store.job_claim(ClaimRequest("default", 10, "w:1:a", 30))
    assert [job.id for job in plain] == [second]


def test_due_check_names_a_task_no_live_worker_knows(
    app: due.App, before: dict[str, due.Task], clock: FakeClock
) -> None:
    """`due check` said only "oldest due job waited 1m7s"."""
    before["gone"].enqueue()
    start_worker(app, "w:1:a", ["export"])
    clock.advance("2m")
    app.store.worker_touch("w:1:a")
    (alert,) = [alert for alert in app.check() if alert.kind == "oldest_due"]
    assert "of task gone, which no live worker of the queue knows" in alert.message
    (queue,) = app.queues()
    assert queue.oldest_due_at is not None
    oldest = [("default", queue.oldest_due_at)]
    assert app.store.queue_unknown_oldest(oldest, 30.0) == {"default": "gone"}
    start_worker(app, "w:2:b", ["gone"])  # a worker that knows it: nothing to say
    assert app.store.queue_unknown_oldest(oldest, 30.0) == {}
