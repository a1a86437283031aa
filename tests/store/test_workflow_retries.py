"""A workflow retried while it runs, after it was pruned, or asked to stop while
a step adds to it, on a real SQLite file and a real PostgreSQL.

Invariant 18 (counted once across retries): a step's dependents count each
upstream step's final outcome once, however often it is retried; a workflow
is kept or pruned whole, and a retry of one whose steps are gone is refused.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import due
from due.clock import FakeClock
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion, PieceSpawn, Retention, StepRequest
from due.errors import InvalidStateError, JobCancelled
from tests.helpers.database import plain_transaction, rows


@pytest.fixture
def tasks(app: due.App) -> dict[str, due.Task]:
    @app.task(name="fetch")
    def fetch(n: int) -> int:
        return n

    @app.task(name="build")
    def build(n: int) -> int:
        return n

    return {"fetch": fetch, "build": build}


def claim(app: due.App, limit: int = 100) -> dict[int, int]:
    """Claim what is due: {job id: lease token}."""
    claimed = app.store.job_claim(ClaimRequest("default", limit, "w", 30))
    return {job.id: job.lease_token for job in claimed}


def end(app: due.App, job_id: int, token: int, state: JobState, result: object = None) -> None:
    text = None if result is None else json.dumps(result)
    completion = Completion(job_id, token, state, result=text)
    completion.settles = True
    assert app.store.job_complete([completion]) == {job_id}


def states(app: due.App, workflow: int) -> dict[str, str]:
    status = app.workflow_status(workflow)
    return {name: step.state.value for name, step in status.steps.items()}


# --- finding 1: a retry while the workflow runs counts no end twice ---------------------


@pytest.mark.parametrize("policy", ["cancel", "run"])
@pytest.mark.parametrize("how", ["workflow", "step"])
def test_a_step_retried_while_another_upstream_step_runs_holds_its_dependent(
    app: due.App, tasks: dict[str, due.Task], policy: str, how: str
) -> None:
    """F fails while G runs: F's end is counted on D, which still waits for G.
    F, retried, succeeds: D still waits for G (its first end no longer counts),
    and once G ends D runs, with both upstream steps succeeded."""
    flow = app.workflow("fan-in")
    f = flow.add(tasks["fetch"].request(1), name="F")
    g = flow.add(tasks["fetch"].request(2), name="G")
    d = flow.add(tasks["build"].request(3), name="D", after=[f, g], on_upstream_failure=policy)
    handle = flow.enqueue()
    running = claim(app)
    assert set(running) == {f.job_id, g.job_id}
    end(app, f.job_id, running[f.job_id], JobState.FAILED)
    assert app.get(d.job_id).state == JobState.WAITING  # G still runs

    if how == "workflow":
        app.retry_workflow(handle.id)
    else:
        app.retry(f.job_id)
    again = claim(app)
    assert set(again) == {f.job_id}
    end(app, f.job_id, again[f.job_id], JobState.SUCCEEDED, 1)
    assert states(app, handle.id) == {"F": "succeeded", "G": "running", "D": "waiting"}
    assert claim(app) == {}  # D does not start before G has ended

    end(app, g.job_id, running[g.job_id], JobState.SUCCEEDED, 2)
    assert app.get(d.job_id).state == JobState.QUEUED
    last = claim(app)
    assert set(last) == {d.job_id}
    upstream = {row["step_name"]: row["state"] for row in app.store.job_upstream(d.job_id)}
    assert upstream == {"F": "succeeded", "G": "succeeded"}
    end(app, d.job_id, last[d.job_id], JobState.SUCCEEDED)
    done = app.workflow_status(handle.id)
    assert (done.state, done.steps_ended) == ("succeeded", 3)
    assert app.workflows()[0].steps_failed == 0


def test_a_step_retried_twice_while_its_dependent_waits_is_counted_once(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    """F fails, is retried, fails again, is retried again: D counts F's last
    end only, and a cancelled step after a retried one is counted again too."""
    flow = app.workflow("twice")
    f = flow.add(tasks["fetch"].request(1), name="F")
    g = flow.add(tasks["fetch"].request(2), name="G")
    h = flow.add(tasks["fetch"].request(3), name="H", after=[f])
    d = flow.add(tasks["build"].request(4), name="D", after=[f, g, h], on_upstream_failure="run")
    handle = flow.enqueue()
    running = claim(app)
    for _ in range(2):
        end(app, f.job_id, running.pop(f.job_id), JobState.FAILED)
        assert states(app, handle.id)["H"] == "cancelled"
        app.retry_workflow(handle.id)
        running |= claim(app)
    end(app, f.job_id, running.pop(f.job_id), JobState.SUCCEEDED)
    running |= claim(app)
    end(app, h.job_id, running.pop(h.job_id), JobState.SUCCEEDED)
    assert app.get(d.job_id).state == JobState.WAITING  # G has not ended
    end(app, g.job_id, running.pop(g.job_id), JobState.SUCCEEDED)
    last = claim(app)
    assert set(last) == {d.job_id}
    end(app, d.job_id, last[d.job_id], JobState.SUCCEEDED)
    done = app.workflow_status(handle.id)
    assert (done.state, done.steps_ended) == ("succeeded", 4)


# --- finding 3: kept or pruned whole; a retry after pruning is refused -----------------


def failed_after_success(app: due.App, tasks: dict[str, due.Task]) -> tuple[int, int, int]:
    """load (succeeds) -> report (fails): the workflow's id and the two steps' ids."""
    flow = app.workflow("month-end")
    load = flow.add(tasks["fetch"].request(1), name="load")
    report = flow.add(tasks["build"].request(2), name="report", after=[load])
    handle = flow.enqueue()
    tasks["fetch"].enqueue(99)  # a job after them: the newest job is never pruned
    for state in (JobState.SUCCEEDED, JobState.FAILED):
        for job, token in claim(app).items():
            if job in (load.job_id, report.job_id):
                end(app, job, token, state, {"rows": 10} if job == load.job_id else None)
    assert app.workflow_status(handle.id).state == "failed"
    assert load.job_id is not None and report.job_id is not None
    return handle.id, load.job_id, report.job_id


def test_a_failed_workflow_is_kept_whole_and_a_retry_reads_its_succeeded_steps(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    workflow, load, report = failed_after_success(app, tasks)
    clock.advance(timedelta(days=8))  # past the succeeded steps' retention, not the failed ones'
    app.store.job_prune(Retention())
    assert app.get(load).result == {"rows": 10}  # kept with its failed workflow

    app.retry_workflow(workflow)
    ((job, token),) = claim(app).items()
    assert job == report
    upstream = {row["step_name"]: row["state"] for row in app.store.job_upstream(report)}
    assert upstream == {"load": "succeeded"}
    end(app, job, token, JobState.SUCCEEDED)
    done = app.workflow_status(workflow)
    assert (done.state, done.steps_ended, done.steps_total) == ("succeeded", 2, 2)


def test_an_ended_workflow_is_pruned_whole_once_its_retention_has_passed(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    workflow, load, report = failed_after_success(app, tasks)
    clock.advance(timedelta(days=29))
    assert app.store.job_prune(Retention()) == (0, 0)
    clock.advance(timedelta(days=2))
    jobs, _ = app.store.job_prune(Retention())
    assert jobs == 2
    for job in (load, report):
        with pytest.raises(due.JobNotFoundError):
            app.get(job)
    with pytest.raises(due.JobNotFoundError):
        app.workflow_status(workflow)
    assert rows(app.url, "SELECT count(*) FROM due_workflow_edges") == [(0,)]


def test_a_retry_of_a_workflow_whose_steps_are_gone_is_refused_and_changes_nothing(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    """A workflow pruned in part (by a version of due that pruned its steps one
    by one): its retry says so, rather than run a step without its upstream
    results and leave the workflow running for ever."""
    workflow, load, report = failed_after_success(app, tasks)
    with plain_transaction(app.url) as conn:
        conn.execute(f"DELETE FROM due_jobs WHERE id = {load}")
    for retry in (lambda: app.retry_workflow(workflow), lambda: app.retry(report)):
        with pytest.raises(InvalidStateError, match=r"1 of its 2 steps .*pruned"):
            retry()
    assert app.get(report).state == JobState.FAILED
    status = app.workflow_status(workflow)
    assert (status.state, status.steps_ended) == ("failed", 2)
    assert app.retry_many(workflow=workflow) == 0  # a bulk retry passes it over


# --- finding 5: nothing is added to a step asked to stop --------------------------------


def test_a_step_asked_to_stop_adds_no_step_and_spawns_no_piece(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    """The store refuses, whatever the worker has heard yet: the request is on
    the step's row, read in the transaction that would add."""
    flow = app.workflow("grows")
    flow.add(tasks["fetch"].request(1), name="first")
    handle = flow.enqueue()
    ((job, token),) = claim(app).items()
    app.cancel_workflow(handle.id)
    (new,) = app._prepare([tasks["build"].request(2)])
    with pytest.raises(JobCancelled):
        app.store.workflow_add(job, token, [StepRequest(new, "later", (), "cancel", ("first",))])
    pieces = app.piece_jobs(tasks["build"], [(n,) for n in range(3)])
    with pytest.raises(JobCancelled):
        app.store.piece_spawn(PieceSpawn(job, token, pieces))
    assert sorted(states(app, handle.id)) == ["first"]
    assert app.get(job).pieces is None or app.get(job).pieces.total == 0
    assert rows(app.url, f"SELECT count(*) FROM due_jobs WHERE parent_id = {job}") == [(0,)]
    end(app, job, token, JobState.SUCCEEDED)
    assert app.workflow_status(handle.id).state == "cancelled"
