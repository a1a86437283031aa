"""What visibility reads of workflows, on a real SQLite file and a real
PostgreSQL: the recent ones newest first, and the ones that cannot advance
(none, unless a test breaks a graph by hand)."""

from __future__ import annotations

import pytest

import due
from due.core.jobs import JobState
from due.errors import ConfigurationError
from tests.helpers.database import plain_transaction
from tests.store.test_workflows import claim, end


@pytest.fixture
def step(app: due.App) -> due.Task:
    @app.task(name="step")
    def run(n: int) -> int:
        return n

    return run


def test_recent_workflows_newest_first_with_their_counts(app: due.App, step: due.Task) -> None:
    first = app.chain(step.request(1), step.request(2), name="first")
    second = app.group([step.request(3), step.request(4)], then=step.request(5), name="second")
    stored = app.store.workflow_recent(10)
    assert [row["id"] for row in stored] == [second.id, first.id]
    newest, oldest = app.workflows()
    assert (newest.name, newest.state, newest.steps_total, newest.steps_ended) == (
        "second",
        "running",
        3,
        0,
    )
    assert oldest.name == "first" and oldest.steps_total == 2 and not oldest.ended
    assert newest.created_at.tzinfo is not None and newest.finished_at is None
    assert [summary.id for summary in app.workflows(limit=1)] == [second.id]
    assert app.workflows(limit=0) == []
    with pytest.raises(ConfigurationError):
        app.workflows(limit=-1)
    for job_id, token in claim(app).items():
        if job_id in first.job_ids.values():
            end(app, job_id, token, JobState.SUCCEEDED, 1)
    for job_id, token in claim(app).items():
        if job_id in first.job_ids.values():
            end(app, job_id, token, JobState.SUCCEEDED, 2)
    (_, done) = app.workflows()
    assert (done.state, done.steps_ended, done.ended) == ("succeeded", 2, True)
    assert done.finished_at is not None
    status = app.workflow_status(first.id)
    for one in status.steps.values():
        assert one.started_at is not None and one.finished_at is not None
        assert one.duration is not None and one.duration >= 0


def test_a_healthy_workflow_is_never_stuck(app: due.App, step: due.Task) -> None:
    handle = app.chain(step.request(1), step.request(2), step.request(3), name="healthy")
    assert app.store.workflow_stuck(10) == []
    while not app.workflow_status(handle.id).ended:
        for job_id, token in claim(app).items():
            assert app.stuck_workflows() == []  # a step runs: nothing is stuck
            end(app, job_id, token, JobState.SUCCEEDED, job_id)
        assert app.stuck_workflows() == []
    assert app.workflow_status(handle.id).state == "succeeded"


def test_a_graph_broken_by_hand_is_stuck(app: due.App, step: due.Task) -> None:
    handle = app.chain(step.request(1), step.request(2), name="broken")
    first = handle.job_ids["step-1"]
    # The first step ends, but its release is lost: its dependent still waits.
    with plain_transaction(app.url) as conn:
        conn.execute(
            f"UPDATE due_jobs SET state = 'succeeded', finished_at = created_at WHERE id = {first}"
        )
    (stuck,) = app.stuck_workflows()
    assert (stuck.id, stuck.name, stuck.step) == (handle.id, "broken", "step-2")
    assert app.store.workflow_stuck(10)[0]["id"] == handle.id


def test_a_workflow_whose_steps_have_all_ended_but_that_says_it_runs_is_stuck(
    app: due.App, step: due.Task
) -> None:
    """Counts broken by hand: nothing to wait for, and nothing ends it. `due
    check` says so, rather than let it, and a wait on it, run for ever."""
    handle = app.chain(step.request(1), name="counted wrong")
    ((job_id, token),) = claim(app).items()
    end(app, job_id, token, JobState.SUCCEEDED, 1)
    assert app.stuck_workflows() == []
    with plain_transaction(app.url) as conn:
        conn.execute(
            "UPDATE due_workflows SET state = 'running', finished_at = NULL, steps_ended = 0 "
            f"WHERE id = {handle.id}"
        )
    (stuck,) = app.stuck_workflows()
    assert (stuck.id, stuck.name, stuck.step) == (handle.id, "counted wrong", None)
    (alert,) = [a for a in app.check() if a.kind == "workflow_stuck"]
    assert "every step has ended, yet it still says it runs" in alert.message
    status = app.cancel_workflow(handle.id)  # what an operator does: it ends, its counts mended
    assert (status.state, status.steps_ended) == ("succeeded", 1)
    assert app.stuck_workflows() == []


def test_the_store_enqueues_cancels_and_retries_a_workflow(app: due.App, step: due.Task) -> None:
    from due.core.records import StepRequest

    jobs = app._prepare([step.request(1), step.request(2)])
    requests = [StepRequest(jobs[0], "a", (), "cancel"), StepRequest(jobs[1], "b", (0,), "cancel")]
    workflow, (a, b) = app.store.workflow_enqueue("by-store", requests)
    assert app.get(b).state == JobState.WAITING
    assert app.store.workflow_cancel(workflow + 1000) is None
    cancelled, asked = app.store.workflow_cancel(workflow)  # type: ignore[misc]
    assert (cancelled, asked) == (sorted([a, b]), [])
    assert app.workflow_status(workflow).state == "cancelled"
    assert app.store.workflow_retry(workflow + 1000) is None
    assert app.store.workflow_retry(workflow) == sorted([a, b])
    assert app.get(a).state == JobState.QUEUED and app.get(b).state == JobState.WAITING
    assert app.workflow_status(workflow).state == "running"
    assert app.stuck_workflows() == []
