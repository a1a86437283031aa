"""A workflow retried while it runs, or asked to stop while a step adds to it,
on a real SQLite file and a real PostgreSQL.
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
