"""`due workflows` and `due workflow show|cancel|retry`: workflows and their steps."""

from __future__ import annotations

import click
from rich.text import Text

from due.cli.bulk import actor
from due.cli.common import Settings, reports_errors
from due.cli.documents import workflow_document, workflow_summary_document
from due.cli.jobs import JSON_HELP
from due.cli.main import main
from due.cli.output import Column, console, fitted_table, print_json, seconds_text, time_text
from due.workflows import StepStatus, WorkflowStatus

STATE_STYLES = {
    "running": "cyan",
    "queued": "blue",
    "waiting": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
}

WORKFLOW_COLUMNS = [
    Column("id", justify="right"),
    Column("name"),
    Column("state"),
    Column("steps ended", justify="right"),
    Column("created", drop_rank=1),
    Column("finished", drop_rank=0),
]
STEP_COLUMNS = [
    Column("step"),
    Column("job", justify="right"),
    Column("state"),
    Column("task", drop_rank=2),
    Column("after", drop_rank=1),
    Column("duration", justify="right", drop_rank=0),
]


def _state(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))


@main.command()
@click.option("-n", "--limit", default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def workflows(settings: Settings, limit: int, as_json: bool) -> None:
    """The most recent workflows, newest first: state and steps ended."""
    found = settings.app.workflows(limit=limit)
    if as_json:
        print_json({"workflows": [workflow_summary_document(flow) for flow in found]})
        return
    if not found:
        console.print("no workflow is stored")
        return
    rows: list[list[Text | str]] = [
        [
            str(flow.id),
            flow.name,
            _state(flow.state),
            f"{flow.steps_ended} of {flow.steps_total}",
            time_text(flow.created_at),
            time_text(flow.finished_at),
        ]
        for flow in found
    ]
    console.print(fitted_table(WORKFLOW_COLUMNS, rows))


@main.group()
def workflow() -> None:
    """One workflow: show its steps, cancel it, retry its failed steps."""


@workflow.command("show")
@click.argument("workflow_id", type=int)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def show_workflow(settings: Settings, workflow_id: int, as_json: bool) -> None:
    """A workflow and each step: its job, state, task, the steps it comes
    after, and how long its job ran."""
    status = settings.app.workflow_status(workflow_id)
    if as_json:
        print_json(workflow_document(status))
        return
    _print_status(status)


@workflow.command("cancel")
@click.argument("workflow_id", type=int)
@click.pass_obj
@reports_errors
def cancel_workflow(settings: Settings, workflow_id: int) -> None:
    """Cancel every unfinished step: queued and waiting ones at once, running
    ones at their next safe point."""
    status = settings.app.cancel_workflow(workflow_id, by=actor())
    running = sum(1 for step in status.steps.values() if step.state == "running")
    said = f"workflow {status.id} is {status.state}"
    if running:
        said += f"; {running} running step(s) asked to stop at their next safe point"
    console.print(said)


@workflow.command("retry")
@click.argument("workflow_id", type=int)
@click.pass_obj
@reports_errors
def retry_workflow(settings: Settings, workflow_id: int) -> None:
    """Run a workflow's failed and cancelled steps again (no step that
    succeeded runs again)."""
    before = settings.app.workflow_status(workflow_id)
    again = [name for name, step in before.steps.items() if step.state in ("failed", "cancelled")]
    status = settings.app.retry_workflow(workflow_id, by=actor())
    if not again:
        console.print(f"workflow {status.id} is {status.state}: no failed or cancelled step")
        return
    console.print(
        f"workflow {status.id} is {status.state} again: {len(again)} step(s) retried "
        f"({', '.join(again)})"
    )


def _print_status(status: WorkflowStatus) -> None:
    header = Text.assemble(
        (f"workflow {status.id} ", "bold"),
        (status.name, "bold"),
        ": ",
        _state(status.state),
        f", {status.steps_ended} of {status.steps_total} steps ended, created ",
        time_text(status.created_at),
    )
    if status.finished_at is not None:
        header.append(f", finished {time_text(status.finished_at)}")
    console.print(header)
    rows = [_step_row(step) for step in status.steps.values()]
    console.print(fitted_table(STEP_COLUMNS, rows))


def _step_row(step: StepStatus) -> list[Text | str]:
    duration = step.duration
    return [
        step.name,
        str(step.job_id),
        _state(step.state.value),
        step.task,
        ", ".join(step.after),
        "" if duration is None else seconds_text(duration),
    ]
