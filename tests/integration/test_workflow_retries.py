"""Workflows retried and cancelled around steps that spawn pieces or add steps,
run by the worker's executor in-process (`drain`) on real stores."""

from __future__ import annotations

import pytest

import due
from due import JobState
from due.testing import drain


@pytest.fixture
def fixed() -> dict[str, bool]:
    """Whether the bug that fails piece 1 has been fixed (by the test)."""
    return {"yet": False}


@pytest.fixture
def ran() -> list[int]:
    """The pieces' runs, in order."""
    return []


@pytest.fixture
def fan_tasks(app: due.App, fixed: dict[str, bool], ran: list[int]) -> dict[str, due.Task]:
    """fan spawns three pieces (in the queue "pieces"); piece 1 fails until fixed."""

    @app.task(name="piece", queue="pieces", retry=due.Retry(max_attempts=1))
    def piece(n: int) -> int:
        ran.append(n)
        if n == 1 and not fixed["yet"]:
            raise RuntimeError("piece 1 breaks")
        return n

    @app.task(name="fan")
    def fan(ctx: due.Context, policy: str) -> None:
        ctx.spawn(piece, [(n,) for n in range(3)], on_piece_failure=policy)

    @app.task(name="after")
    def after(ctx: due.Context) -> str:
        return ctx.upstream_states["fan"].value

    return {"fan": fan, "after": after}


def fan_then_after(app: due.App, tasks: dict[str, due.Task], policy: str) -> tuple[int, int, int]:
    flow = app.workflow("fan")
    fan = flow.add(tasks["fan"].request(policy), name="fan")
    after = flow.add(tasks["after"].request(), name="after", after=[fan])
    handle = flow.enqueue()
    assert fan.job_id is not None and after.job_id is not None
    return handle.id, fan.job_id, after.job_id


def states(app: due.App, workflow: int) -> dict[str, str]:
    return {name: s.state.value for name, s in app.workflow_status(workflow).steps.items()}


def test_a_step_failed_by_its_pieces_is_retried_with_them_and_the_steps_after_it_run(
    app: due.App, fan_tasks: dict[str, due.Task], fixed: dict[str, bool], ran: list[int]
) -> None:
    workflow, fan, after = fan_then_after(app, fan_tasks, "fail")
    drain(app)
    assert states(app, workflow) == {"fan": "failed", "after": "cancelled"}
    assert ran == [0, 1]  # piece 1 failed the step; piece 2 was cancelled with it

    fixed["yet"] = True
    app.retry_workflow(workflow)
    assert states(app, workflow) == {"fan": "queued", "after": "waiting"}
    drain(app)
    status = app.wait_workflow(workflow, timeout="10s")
    assert states(app, workflow) == {"fan": "succeeded", "after": "succeeded"}
    assert status.state == "succeeded"
    pieces = app.get(fan).pieces
    assert pieces is not None and (pieces.total, pieces.succeeded, pieces.failed) == (3, 3, 0)
    assert app.get(after).result == "succeeded"
    # Only the pieces that had not succeeded ran again, and none was added.
    assert sorted(ran) == [0, 1, 1, 2]
    assert len(app.jobs(parent=fan, limit=10)) == 3


def test_a_workflow_cancelled_while_a_step_waits_for_its_pieces_runs_them_when_retried(
    app: due.App, fan_tasks: dict[str, due.Task], fixed: dict[str, bool]
) -> None:
    """The how-to's flow: cancel while the step waits for its pieces, then retry."""
    fixed["yet"] = True
    workflow, fan, _ = fan_then_after(app, fan_tasks, "continue")
    drain(app, queues=["default"])  # fan runs and spawns; its pieces wait in their queue
    assert app.get(fan).state == JobState.WAITING
    status = app.cancel_workflow(workflow)
    assert states(app, workflow) == {"fan": "cancelled", "after": "cancelled"}
    assert {job.state for job in app.jobs(parent=fan, limit=10)} == {JobState.CANCELLED}
    assert status.state == "cancelled"

    app.retry_workflow(workflow)
    drain(app)
    status = app.wait_workflow(workflow, timeout="10s")
    assert (status.state, states(app, workflow)) == (
        "succeeded",
        {"fan": "succeeded", "after": "succeeded"},
    )
    assert {job.state for job in app.jobs(parent=fan, limit=10)} == {JobState.SUCCEEDED}


def test_a_cancel_stops_a_step_from_adding_steps_or_spawning_pieces(app: due.App) -> None:
    """A cancel that arrives while a step runs (before any heartbeat tells its
    worker): the step's next add or spawn is refused by the store, and it ends
    cancelled; nothing it would have added runs."""
    ran: list[str] = []
    refused: list[str] = []

    @app.task(name="late")
    def late() -> None:
        ran.append("late")

    @app.task(name="grow")
    def grow(ctx: due.Context, what: str) -> None:
        workflow = app.get(ctx.job_id).workflow_id
        assert workflow is not None
        app.cancel_workflow(workflow)  # from elsewhere, say, as this step runs
        try:
            if what == "add":
                ctx.workflow.add(late.request(), name="late")
            else:
                ctx.spawn(late, [()])
        except due.JobCancelled:
            refused.append(what)
            raise

    for what in ("add", "spawn"):
        flow = app.workflow(what)
        step = flow.add(grow.request(what), name="grow")
        handle = flow.enqueue()
        drain(app)
        assert app.get(step.job_id).state == JobState.CANCELLED
        assert sorted(states(app, handle.id)) == ["grow"]
        assert app.workflow_status(handle.id).state == "cancelled"
    assert refused == ["add", "spawn"]
    assert ran == []
    assert [job.task for job in app.jobs(limit=10)] == ["grow", "grow"]
