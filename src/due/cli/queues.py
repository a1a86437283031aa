"""`due status`, `due pause`, `due resume`: queues at a glance, and the brakes."""

from __future__ import annotations

from datetime import datetime

import click
from rich.progress_bar import ProgressBar
from rich.table import Table

from due.cli.common import Settings, console, reports_errors
from due.cli.main import main
from due.job import Job, JobState
from due.store.records import QueueOverview

RUNNING_SHOWN = 20


@main.command()
@click.option(
    "-n",
    "--running",
    "running_limit",
    default=RUNNING_SHOWN,
    show_default=True,
    help="Show at most this many running and waiting jobs.",
)
@click.pass_obj
@reports_errors
def status(settings: Settings, running_limit: int) -> None:
    """Every queue (depth, due now, running, stuck, age of the oldest due job,
    paused) and the jobs running now with their progress."""
    app = settings.app
    now = app.store.now()
    table = Table("queue", "queued", "due now", "running", "waiting", "stuck", "oldest due", "")
    for queue in app.queues():
        table.add_row(
            queue.name,
            str(queue.queued),
            str(queue.due),
            str(queue.running),
            str(queue.waiting),
            f"[red]{queue.stuck}[/red]" if queue.stuck else "0",
            age_text(queue, now),
            "[yellow]paused[/yellow]" if queue.paused else "",
        )
    console.print(table)
    active = [
        *app.jobs(state=JobState.RUNNING, limit=running_limit),
        *app.jobs(state=JobState.WAITING, limit=running_limit),
    ]
    if active:
        console.print(progress_table(active))


def age_text(queue: QueueOverview, now: datetime) -> str:
    if queue.oldest_due_at is None:
        return ""
    return seconds_text(max(0.0, (now - queue.oldest_due_at).total_seconds()))


def seconds_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


def progress_table(jobs: list[Job]) -> Table:
    table = Table("id", "task", "state", "progress", "", "message")
    for job in jobs:
        done, total, message = progress_of(job)
        table.add_row(
            str(job.id),
            job.task,
            "[red]stuck[/red]" if job.stuck else job.state.value,
            ProgressBar(total=total, completed=done, width=30) if total else "",
            f"{done:g}/{total:g}" if total else (f"{done:g}" if done else ""),
            message,
        )
    return table


def progress_of(job: Job) -> tuple[float, float | None, str]:
    """(done, total, message) from a job's reported progress or its pieces."""
    if job.pieces is not None:
        message = f"{job.pieces.failed} failed" if job.pieces.failed else ""
        return float(job.pieces.ended), float(job.pieces.total), message
    progress = job.progress or {}
    total = progress.get("total")
    return (
        float(progress.get("done", 0)),
        float(total) if total is not None else None,
        str(progress.get("message", "")),
    )


@main.command()
@click.argument("queue", required=False)
@click.option("--group", type=int, help="Instead of a queue: the pieces of this parent job.")
@click.pass_obj
@reports_errors
def pause(settings: Settings, queue: str | None, group: int | None) -> None:
    """Stop starting a queue's jobs (or a parent's pieces); running ones finish.
    Durable until `due resume`."""
    if group is not None:
        settings.app.pause_group(group)
        console.print(f"pieces of job {group} are paused")
    else:
        settings.app.pause_queue(_queue(queue))
        console.print(f"queue {queue} is paused")


@main.command()
@click.argument("queue", required=False)
@click.option("--group", type=int, help="Instead of a queue: the pieces of this parent job.")
@click.pass_obj
@reports_errors
def resume(settings: Settings, queue: str | None, group: int | None) -> None:
    """Start a paused queue's jobs (or a parent's pieces) again."""
    if group is not None:
        settings.app.resume_group(group)
        console.print(f"pieces of job {group} are resumed")
    else:
        settings.app.resume_queue(_queue(queue))
        console.print(f"queue {queue} is resumed")


def _queue(queue: str | None) -> str:
    if queue is None:
        raise click.UsageError("name a QUEUE, or give --group PARENT_ID")
    return queue
