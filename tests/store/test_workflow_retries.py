"""A workflow retried while it runs, or asked to stop while a step adds to it,
on a real SQLite file and a real PostgreSQL.

Invariant 18 (counted once across retries): a step's dependents count each
upstream step's final outcome once, however often it is retried.
"""

from __future__ import annotations

import json

import pytest

import due
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion, PieceSpawn, StepRequest
from due.errors import JobCancelled
from tests.helpers.database import rows


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
