"""What `due check` says of workflows, on every backend: a healthy workflow
raises nothing at any point of its run (a step waiting for a running or
queued one is not stuck); one whose graph was broken by hand (a step's end
recorded without its release) raises a critical alert naming it, and `due
check` exits 2."""

from __future__ import annotations

import json

import pytest

import due
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion, WorkerRegistration
from tests.helpers.cli import run_due
from tests.helpers.database import plain_transaction


@pytest.fixture
def step(app: due.App) -> due.Task:
    @app.task(name="step")
    def run(n: int) -> int:
        return n

    app.store.worker_register(WorkerRegistration("w:1:a", "host", 1, {"default": 4}))
    return run


def workflow_alerts(app: due.App) -> list[due.Alert]:
    return [alert for alert in app.check() if alert.kind == "workflow_stuck"]


def run_due_steps(app: due.App, state: JobState = JobState.SUCCEEDED) -> list[int]:
    """Claim every due step and end each in `state`, checking before each end."""
    claimed = app.store.job_claim(ClaimRequest("default", 100, "w:1:a", 600))
    for job in claimed:
        assert workflow_alerts(app) == []
        completion = Completion(job.id, job.lease_token, state, result="1")
        completion.settles = True
        app.store.job_complete([completion])
    return [job.id for job in claimed]


def test_a_healthy_workflow_raises_nothing_from_start_to_end(app: due.App, step: due.Task) -> None:
    flow = app.workflow("diamond")
    top = flow.add(step.request(0), name="top")
    left = flow.add(step.request(1), name="left", after=[top])
    right = flow.add(step.request(2), name="right", after=[top])
    flow.add(step.request(3), name="bottom", after=[left, right])
    handle = flow.enqueue()
    while not app.workflow_status(handle.id).ended:
        assert workflow_alerts(app) == []
        assert run_due_steps(app)
    assert app.workflow_status(handle.id).state == "succeeded"
    failing = app.chain(step.request(4), step.request(5), name="fails")
    assert run_due_steps(app, JobState.FAILED)  # its first step fails: its second is cancelled
    assert app.workflow_status(failing.id).state == "failed"
    assert workflow_alerts(app) == []
    app.retry_workflow(failing.id)
    assert workflow_alerts(app) == []  # retried: queued again


def test_a_graph_broken_by_hand_raises_a_critical_alert_naming_it(
    app: due.App, step: due.Task, backend_url: str
) -> None:
    handle = app.chain(step.request(1), step.request(2), name="month-end")
    first = handle.job_ids["step-1"]
    with plain_transaction(app.url) as conn:  # an end recorded without its release
        conn.execute(
            f"UPDATE due_jobs SET state = 'succeeded', finished_at = created_at WHERE id = {first}"
        )
    (alert,) = workflow_alerts(app)
    assert alert.severity == due.Severity.CRITICAL
    assert alert.subject == f"workflow {handle.id} month-end"
    assert "step 'step-2' waits though its upstream steps have all ended" in alert.message
    document = json.loads(run_due(backend_url, "check", "--json", expect=2))
    assert any(
        found["kind"] == "workflow_stuck" and found["subject"] == alert.subject
        for found in document["alerts"]
    )
    app.cancel_workflow(handle.id)  # what an operator does: it ends, and the alert with it
    assert workflow_alerts(app) == []
