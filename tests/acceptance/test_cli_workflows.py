"""`due workflows` and `due workflow show|cancel|retry`, run as a user runs
them (in a subprocess), on both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import due
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion
from tests.helpers.cli import run_due


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    application = due.App(backend_url)
    application.migrate()
    yield application
    application.close()


@pytest.fixture
def step(app: due.App) -> due.Task:
    @app.task(name="step")
    def run(n: int) -> int:
        return n

    return run


def run_one(app: due.App, state: JobState = JobState.SUCCEEDED) -> int:
    """Claim one due job and end it in `state`; its id."""
    (job,) = app.store.job_claim(ClaimRequest("default", 1, "w", 30))
    completion = Completion(job.id, job.lease_token, state, result="1")
    completion.settles = True
    app.store.job_complete([completion])
    return job.id


def test_the_workflows_and_one_workflows_steps(
    app: due.App, step: due.Task, backend_url: str
) -> None:
    older = app.chain(step.request(1), step.request(2), name="older")
    flow = app.workflow("month-end")
    rates = flow.add(step.request(1), name="rates")
    invoices = flow.add(step.request(2), name="invoices")
    flow.add(step.request(3), name="mails", after=[rates, invoices])
    handle = flow.enqueue()
    run_one(app)  # older's first step
    listed = run_due(backend_url, "workflows")
    assert listed.index("month-end") < listed.index("older")  # newest first
    assert "1 of 2" in listed and "0 of 3" in listed and "running" in listed
    document = json.loads(run_due(backend_url, "workflows", "--json", "--limit", "1"))
    (only,) = document["workflows"]
    assert (only["id"], only["name"], only["state"]) == (handle.id, "month-end", "running")
    assert (only["steps_total"], only["steps_ended"], only["finished_at"]) == (3, 0, None)

    shown = run_due(backend_url, "workflow", "show", str(older.id))
    assert f"workflow {older.id} older" in shown and "1 of 2 steps ended" in shown
    assert "step-1" in shown and "succeeded" in shown and "waiting" not in shown
    shown = run_due(backend_url, "workflow", "show", str(handle.id))
    assert "invoices, rates" in shown and "waiting" in shown
    document = json.loads(run_due(backend_url, "workflow", "show", str(older.id), "--json"))
    first, second = document["steps"]
    assert (first["name"], first["state"], first["after"]) == ("step-1", "succeeded", [])
    assert first["job_id"] == older.job_ids["step-1"] and first["task"] == "step"
    assert first["duration_seconds"] is not None and first["started_at"] is not None
    assert (second["name"], second["state"], second["after"]) == ("step-2", "queued", ["step-1"])
    assert second["duration_seconds"] is None


def test_cancel_and_retry_a_workflow(app: due.App, step: due.Task, backend_url: str) -> None:
    handle = app.chain(step.request(1), step.request(2), step.request(3), name="nightly")
    run_one(app)
    said = run_due(backend_url, "workflow", "cancel", str(handle.id))
    assert f"workflow {handle.id} is cancelled" in said
    status = app.workflow_status(handle.id)
    assert [s.state for s in status.steps.values()] == ["succeeded", "cancelled", "cancelled"]
    history = app.history(job=handle.job_ids["step-2"])
    assert [(entry.action, entry.by.startswith("cli:")) for entry in history] == [
        ("cancel_workflow", True)
    ]
    said = run_due(backend_url, "workflow", "retry", str(handle.id))
    assert f"workflow {handle.id} is running again: 2 step(s) retried (step-2, step-3)" in said
    states = [s.state for s in app.workflow_status(handle.id).steps.values()]
    assert states == ["succeeded", "queued", "waiting"]
    actions = {entry.action for entry in app.history(job=handle.job_ids["step-3"])}
    assert actions == {"cancel_workflow", "retry_workflow"}


def test_an_unknown_workflow_is_one_clear_line(app: due.App, backend_url: str) -> None:
    for command in ("show", "cancel", "retry"):
        out = run_due(backend_url, "workflow", command, "424242", expect=1)
        assert "error: no workflow with id 424242" in out and "Traceback" not in out
    assert "no workflow is stored" in run_due(backend_url, "workflows")
    assert json.loads(run_due(backend_url, "workflows", "--json")) == {"workflows": []}
