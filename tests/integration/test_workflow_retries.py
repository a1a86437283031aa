"""Workflows cancelled around steps that add steps or spawn pieces, run by the
worker's executor in-process (`drain`) on real stores."""

from __future__ import annotations

import due
from due import JobState
from due.testing import drain


def states(app: due.App, workflow: int) -> dict[str, str]:
    return {name: s.state.value for name, s in app.workflow_status(workflow).steps.items()}


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
