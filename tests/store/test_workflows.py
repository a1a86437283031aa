"""Workflows in the store, on a real SQLite file and a real PostgreSQL: a step
waits until its upstream steps have ended, is released in the transaction that
records the end of its last one (exactly once), reads their results by name,
and is cancelled, or run anyway, by its policy when one of them failed."""

from __future__ import annotations

import threading

import pytest

import due
from due.clock import FakeClock
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion
from due.errors import ConfigurationError
from due.workflows import Step, WorkflowHandle
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
    import json

    text = None if result is None else json.dumps(result)
    completion = Completion(job_id, token, state, result=text)
    completion.settles = True
    assert app.store.job_complete([completion]) == {job_id}


def test_a_step_runs_once_all_its_upstream_steps_ended(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    flow = app.workflow("month-end")
    rates = flow.add(tasks["fetch"].request(1), name="rates")
    invoices = flow.add(tasks["fetch"].request(2), name="invoices")
    mails = flow.add(tasks["build"].request(3), name="mails", after=[rates, invoices])
    handle = flow.enqueue()
    assert handle.job_ids == {
        "rates": rates.job_id,
        "invoices": invoices.job_id,
        "mails": mails.job_id,
    }
    assert app.get(mails.job_id).state == JobState.WAITING
    first = claim(app)
    assert set(first) == {rates.job_id, invoices.job_id}  # not the waiting step
    end(app, rates.job_id, first[rates.job_id], JobState.SUCCEEDED, {"eur": 1.1})
    assert app.get(mails.job_id).state == JobState.WAITING  # one upstream step left
    assert claim(app) == {}
    end(app, invoices.job_id, first[invoices.job_id], JobState.SUCCEEDED, [1, 2])
    assert app.get(mails.job_id).state == JobState.QUEUED  # released by that end
    second = claim(app)
    assert set(second) == {mails.job_id}
    upstream = {row["step_name"]: row["state"] for row in app.store.job_upstream(mails.job_id)}
    assert upstream == {"rates": "succeeded", "invoices": "succeeded"}
    status = app.workflow_status(handle.id)
    assert status.state == "running"
    assert status.steps["mails"].after == ("invoices", "rates")
    end(app, mails.job_id, second[mails.job_id], JobState.SUCCEEDED)
    status = app.workflow_status(handle.id)
    assert status.state == "succeeded" and status.finished_at is not None
    assert {step.state for step in status.steps.values()} == {JobState.SUCCEEDED}


def test_a_failed_step_cancels_its_dependents_all_the_way_down_unless_they_run_anyway(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    flow = app.workflow("fragile")
    first = flow.add(tasks["fetch"].request(1), name="first")
    second = flow.add(tasks["build"].request(2), name="second", after=[first])
    third = flow.add(tasks["build"].request(3), name="third", after=[second])
    audit = flow.add(
        tasks["build"].request(4), name="audit", after=[second], on_upstream_failure="run"
    )
    handle = flow.enqueue()
    claimed = claim(app)
    end(app, first.job_id, claimed[first.job_id], JobState.FAILED)
    states = {name: step.state for name, step in app.workflow_status(handle.id).steps.items()}
    assert states == {
        "first": JobState.FAILED,
        "second": JobState.CANCELLED,
        "third": JobState.CANCELLED,
        "audit": JobState.QUEUED,  # runs anyway: its upstream step was cancelled
    }
    assert "upstream step" in app.get(third.job_id).errors[-1].error
    claimed = claim(app)
    assert set(claimed) == {audit.job_id}
    end(app, audit.job_id, claimed[audit.job_id], JobState.SUCCEEDED)
    assert app.workflow_status(handle.id).state == "failed"


def test_two_upstream_ends_at_once_release_the_step_once(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    flow = app.workflow("fan-in")
    members = [flow.add(tasks["fetch"].request(n), name=f"m{n}") for n in range(8)]
    last = flow.add(tasks["build"].request(0), name="last", after=members)
    flow.enqueue()
    claimed = claim(app)
    assert len(claimed) == 8
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def finish(job_id: int) -> None:
        try:
            barrier.wait(5)
            end(app, job_id, claimed[job_id], JobState.SUCCEEDED, job_id)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=finish, args=(job,)) for job in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert app.get(last.job_id).state == JobState.QUEUED
    (pending,) = rows(app.url, f"SELECT upstream_pending FROM due_jobs WHERE id = {last.job_id}")
    assert pending == (0,)
    assert set(claim(app)) == {last.job_id}


def test_bad_graphs_are_refused_before_anything_is_written(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    flow = app.workflow("bad")
    one = flow.add(tasks["fetch"].request(1), name="one")
    with pytest.raises(ConfigurationError, match="has a step named 'one'"):
        flow.add(tasks["fetch"].request(2), name="one")
    other = app.workflow("other")
    with pytest.raises(ConfigurationError, match="not a step of workflow 'other'"):
        other.add(tasks["fetch"].request(3), after=[one])
    with pytest.raises(ConfigurationError, match="on_upstream_failure"):
        flow.add(tasks["fetch"].request(4), on_upstream_failure="ignore")
    with pytest.raises(ConfigurationError, match="no step"):
        app.workflow("empty").enqueue()
    assert app.jobs(limit=10) == []


def test_a_cancelled_workflow_ends_its_unfinished_steps_and_a_retry_runs_what_did_not_succeed(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    flow = app.workflow("month-end")
    rates = flow.add(tasks["fetch"].request(1), name="rates")
    invoices = flow.add(tasks["fetch"].request(2), name="invoices", after=[rates])
    mails = flow.add(tasks["build"].request(3), name="mails", after=[invoices])
    flow.add(tasks["build"].request(4), name="side")
    handle = flow.enqueue()
    claimed = claim(app, 1)  # rates runs; side stays queued
    assert set(claimed) == {rates.job_id}
    status = app.cancel_workflow(handle.id, by="ops")
    states = {name: step.state for name, step in status.steps.items()}
    assert states == {
        "rates": JobState.RUNNING,  # asked to stop: it ends at its next safe point
        "invoices": JobState.CANCELLED,
        "mails": JobState.CANCELLED,
        "side": JobState.CANCELLED,
    }
    assert app.get(rates.job_id).cancel_requested
    assert [a.action for a in app.history(job=mails.job_id)] == ["cancel_workflow"]
    end(app, rates.job_id, claimed[rates.job_id], JobState.CANCELLED)
    assert app.workflow_status(handle.id).state == "cancelled"

    status = app.retry_workflow(handle.id, by="ops")
    assert status.state == "running"
    states = {name: step.state for name, step in status.steps.items()}
    assert states == {
        "rates": JobState.QUEUED,
        "invoices": JobState.WAITING,  # after rates, run again
        "mails": JobState.WAITING,
        "side": JobState.QUEUED,
    }
    for _ in range(3):
        for job, token in claim(app).items():
            end(app, job, token, JobState.SUCCEEDED, job)
    done = app.workflow_status(handle.id)
    assert done.state == "succeeded"
    assert {step.state for step in done.steps.values()} == {JobState.SUCCEEDED}
    assert app.get(mails.job_id).attempt == 1  # a fresh set of attempts


def good_bad_after(
    app: due.App, tasks: dict[str, due.Task], name: str
) -> tuple[WorkflowHandle, tuple[Step, Step, Step]]:
    """A workflow of three steps in a row, failed at the second (the third
    cancelled by it): its handle and the steps."""
    flow = app.workflow(name)
    good = flow.add(tasks["fetch"].request(1), name="good")
    bad = flow.add(tasks["fetch"].request(2), name="bad", after=[good])
    after = flow.add(tasks["build"].request(3), name="after", after=[bad])
    handle = flow.enqueue()
    for state in (JobState.SUCCEEDED, JobState.FAILED):
        ((job, token),) = claim(app).items()
        end(app, job, token, state)
    assert app.workflow_status(handle.id).state == "failed"
    return handle, (good, bad, after)


def test_a_retried_workflow_runs_no_step_that_succeeded(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    handle, (good, bad, after) = good_bad_after(app, tasks, "partial")
    assert app.get(after.job_id).state == JobState.CANCELLED
    app.retry_workflow(handle.id)
    assert app.get(good.job_id).state == JobState.SUCCEEDED
    assert set(claim(app)) == {bad.job_id}
    assert app.get(after.job_id).state == JobState.WAITING
    with pytest.raises(due.JobNotFoundError):
        app.retry_workflow(987654)
    with pytest.raises(due.JobNotFoundError):
        app.cancel_workflow(987654)


def test_a_step_retried_alone_runs_again_with_the_steps_after_it(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    """`app.retry` of a failed step retries it with its workflow: the step after
    it, cancelled by its failure, waits for it again and the counts add up."""
    handle, (good, bad, after) = good_bad_after(app, tasks, "one-step")
    with pytest.raises(due.InvalidStateError):
        app.retry(good.job_id)  # it succeeded: nothing else is retried either
    assert app.get(after.job_id).state == JobState.CANCELLED

    retried = app.retry(bad.job_id, by="ops")
    assert (retried.id, retried.state) == (bad.job_id, JobState.QUEUED)
    assert app.get(after.job_id).state == JobState.WAITING
    running = app.workflow_status(handle.id)
    assert (running.state, running.steps_ended) == ("running", 1)
    for expected in (bad.job_id, after.job_id):
        ((job, token),) = claim(app).items()
        assert job == expected
        end(app, job, token, JobState.SUCCEEDED)
    done = app.workflow_status(handle.id)
    assert (done.state, done.steps_ended) == ("succeeded", 3)
    assert app.workflows()[0].steps_failed == 0  # read again, not left at 1


def test_the_store_writes_a_workflow_and_cancels_and_retries_it(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    from due.core.records import StepRequest

    jobs = app._prepare([tasks["fetch"].request(1), tasks["build"].request(2)])
    steps = [StepRequest(jobs[0], "first"), StepRequest(jobs[1], "second", (0,), "run")]
    workflow, (first, second) = app.store.workflow_enqueue("direct", steps)
    assert [app.get(first).state, app.get(second).state] == [JobState.QUEUED, JobState.WAITING]
    assert app.store.workflow_cancel(workflow) == ([first, second], [])
    assert app.store.workflow_cancel(workflow + 1000) is None
    assert app.store.workflow_retry(workflow) == [first, second]
    assert app.store.workflow_retry(workflow + 1000) is None
    row, _ = app.store.workflow_status(workflow) or ({}, [])
    assert (row["state"], row["steps_ended"]) == ("running", 0)


def test_a_step_s_result_is_kept_while_its_workflow_runs(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    from datetime import timedelta

    from due.core.records import Retention

    flow = app.workflow("slow")
    first = flow.add(tasks["fetch"].request(1), name="first")
    second = flow.add(tasks["build"].request(2), name="second", after=[first])
    handle = flow.enqueue()
    tasks["fetch"].enqueue(99)  # a job after them: the newest job is never pruned
    ((job, token),) = ((j, t) for j, t in claim(app).items() if j == first.job_id)
    end(app, job, token, JobState.SUCCEEDED, {"rates": 1})
    clock.advance(timedelta(days=30))
    app.store.job_prune(Retention(succeeded=3600, failed=3600))
    assert app.get(first.job_id).result == {"rates": 1}  # its workflow still runs
    ((job, token),) = ((j, t) for j, t in claim(app).items() if j == second.job_id)
    end(app, job, token, JobState.SUCCEEDED)
    clock.advance(timedelta(days=30))
    app.store.job_prune(Retention(succeeded=3600, failed=3600))
    with pytest.raises(due.JobNotFoundError):
        app.get(first.job_id)
    with pytest.raises(due.JobNotFoundError):
        app.workflow_status(handle.id)  # gone with its last step
    assert rows(app.url, "SELECT count(*) FROM due_workflow_edges") == [(0,)]


def test_a_running_step_adds_a_step_through_the_store_fenced_by_its_lease(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    from due.core.records import StepRequest

    flow = app.workflow("grows")
    first = flow.add(tasks["fetch"].request(1), name="first")
    flow.enqueue()
    ((job, token),) = claim(app).items()
    (new,) = app._prepare([tasks["build"].request(2)])
    added = app.store.workflow_add(
        job, token, [StepRequest(new, "later", (), "cancel", ("first",))]
    )
    assert added is not None and app.get(added[0]).state == JobState.WAITING
    assert (
        app.store.workflow_add(job, token, [StepRequest(new, "later")]) == added
    )  # again: nothing new
    assert app.store.workflow_add(job, token + 1, [StepRequest(new, "other")]) is None  # lease lost
    with pytest.raises(ConfigurationError, match="no step named 'nope'"):
        app.store.workflow_add(job, token, [StepRequest(new, "x", (), "cancel", ("nope",))])
    end(app, first.job_id, token, JobState.SUCCEEDED)
    assert app.get(added[0]).state == JobState.QUEUED
