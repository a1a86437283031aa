"""`due migrate`, `due jobs`, `due show`, `due cancel`, `due retry`."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from due.cli.common import Settings, console, reports_errors, time_text
from due.cli.main import main
from due.cli.queues import progress_of
from due.job import Job, JobState


@main.command()
@click.pass_obj
@reports_errors
def migrate(settings: Settings) -> None:
    """Create or upgrade the database schema."""
    applied = settings.app.migrate()
    if applied:
        console.print(f"applied migrations {', '.join(map(str, applied))}")
    else:
        console.print("schema is up to date")


@main.command()
@click.option("-q", "--queue", help="Only this queue.")
@click.option(
    "-s", "--state", type=click.Choice([s.value for s in JobState]), help="Only this state."
)
@click.option("-t", "--task", help="Only this task.")
@click.option("-p", "--parent", type=int, help="Only the pieces of this parent job.")
@click.option("--stuck", is_flag=True, help="Only running jobs whose progress stopped moving.")
@click.option("-n", "--limit", default=50, show_default=True, help="At most this many.")
@click.pass_obj
@reports_errors
def jobs(
    settings: Settings,
    queue: str | None,
    state: str | None,
    task: str | None,
    parent: int | None,
    stuck: bool,
    limit: int,
) -> None:
    """List jobs, newest first (delayed jobs are queued with a future run_at)."""
    table = Table("id", "task", "queue", "state", "attempt", "run at", "progress", "last error")
    listed = settings.app.jobs(
        queue=queue, state=state, task=task, parent=parent, stuck=stuck, limit=limit
    )
    for job in listed:
        table.add_row(
            str(job.id),
            job.task,
            job.queue,
            "stuck" if job.stuck else job.state.value,
            f"{job.attempt}/{job.max_attempts}",
            time_text(job.run_at),
            progress_text(job),
            (job.last_error or "")[:60],
        )
    console.print(table)


@main.command()
@click.argument("job_id", type=int)
@click.pass_obj
@reports_errors
def show(settings: Settings, job_id: int) -> None:
    """Show one job: its state, times, and the error of every attempt."""
    _print_job(settings.app.get(job_id))


@main.command()
@click.argument("job_id", type=int)
@click.pass_obj
@reports_errors
def cancel(settings: Settings, job_id: int) -> None:
    """Cancel a job: a queued one at once, a running one at its next safe point,
    a waiting parent with its unfinished pieces."""
    job = settings.app.cancel(job_id)
    if job.state == JobState.RUNNING:
        console.print(f"job {job.id} is asked to stop; it ends at its next safe point")
    else:
        console.print(f"job {job.id} is {job.state.value}")


@main.command()
@click.argument("job_id", type=int)
@click.pass_obj
@reports_errors
def retry(settings: Settings, job_id: int) -> None:
    """Run a failed or cancelled job again."""
    job = settings.app.retry(job_id)
    console.print(f"job {job.id} is {job.state.value} again, due {time_text(job.run_at)}")


def progress_text(job: Job) -> str:
    done, total, message = progress_of(job)
    if total:
        text = f"{done:g}/{total:g} ({100 * done / total:.0f}%)"
    else:
        text = f"{done:g}" if done else ""
    return f"{text} {message}".strip()


def pieces_text(job: Job) -> str | None:
    if job.pieces is None:
        return None
    pieces = job.pieces
    return f"{pieces.ended} of {pieces.total} ended ({pieces.succeeded} ok, {pieces.failed} failed)"


def _print_job(job: Job) -> None:
    table = Table(show_header=False, box=None)
    fields: list[tuple[str, Any]] = [
        ("id", job.id),
        ("task", job.task),
        ("queue", job.queue),
        ("state", job.state.value),
        ("priority", job.priority),
        ("attempt", f"{job.attempt}/{job.max_attempts}"),
        ("args", job.args),
        ("kwargs", job.kwargs),
        ("key", job.key),
        ("run at", time_text(job.run_at)),
        ("created", time_text(job.created_at)),
        ("started", time_text(job.started_at)),
        ("finished", time_text(job.finished_at)),
        ("worker", job.worker),
        ("result", job.result),
        ("parent", job.parent_id),
        ("pieces", pieces_text(job)),
        ("progress", progress_text(job)),
        ("checkpoint", job.checkpoint),
        ("stuck", "yes: its progress stopped moving" if job.stuck else None),
        ("held", "yes: its group is paused" if job.held else None),
    ]
    for name, value in fields:
        table.add_row(name, "" if value is None else str(value))
    console.print(table)
    for error in job.errors:
        console.print(f"[bold]attempt {error.attempt}[/bold] ({error.kind}): {error.error}")
        if error.traceback:
            console.print(error.traceback, highlight=False, markup=False)
