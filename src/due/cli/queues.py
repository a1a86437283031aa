"""`due status`, `due pause`, `due resume`: queues at a glance, and the brakes."""

from __future__ import annotations

import math
from datetime import datetime

import click
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from due.cli.common import Settings, reports_errors
from due.cli.documents import job_document, limit_document, queue_document, task_document
from due.cli.jobs import JSON_HELP
from due.cli.limits import limits_table
from due.cli.main import main
from due.cli.output import Column, console, fitted_table, print_json, seconds_text
from due.cli.progress import progress_of
from due.core.jobs import Job, JobState
from due.core.records import DEFAULT_ALIVE_SECONDS, QueueOverview
from due.core.stats import DURATION_BUCKETS, TaskFigures

RUNNING_SHOWN = 20
QUEUE_COLUMNS = [
    Column("queue"),
    Column("queued", justify="right"),
    Column("due now", justify="right"),
    Column("running", justify="right"),
    Column("waiting", justify="right", drop_rank=1),
    Column("retrying", justify="right"),
    Column("failed", justify="right"),
    Column("stuck", justify="right", drop_rank=0),
    Column("oldest due", justify="right"),
    Column("workers", justify="right", drop_rank=1),
    Column("paused", drop_rank=2),
]
TASK_COLUMNS = [
    Column("task"),
    Column("queue", drop_rank=1),
    Column("ok 1h", justify="right"),
    Column("warned", justify="right", drop_rank=0),
    Column("failed", justify="right"),
    Column("retried", justify="right", drop_rank=0),
    Column("rescued", justify="right", drop_rank=0),
    Column("p50", justify="right"),
    Column("p95", justify="right", drop_rank=1),
    Column("p99", justify="right", drop_rank=0),
    Column("total ok", justify="right", drop_rank=2),
]
ACTIVE_COLUMNS = [
    Column("id", justify="right"),
    Column("task"),
    Column("state"),
    Column("progress", drop_rank=1),
    Column("done", drop_rank=2),
    Column("message", drop_rank=0),
]


@main.command()
@click.option(
    "-n",
    "--running",
    "running_limit",
    default=RUNNING_SHOWN,
    show_default=True,
    help="Show at most this many running and waiting jobs.",
)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def status(settings: Settings, running_limit: int, as_json: bool) -> None:
    """Every queue (depth, due now, running, retrying, failed, stuck, age of the
    oldest due job, live workers, paused), every task's outcomes and durations
    over the last hour, the limits (when any is stored: see `due limit`), and
    the jobs running now with their progress."""
    app = settings.app
    store = app.store
    now = store.now()
    queues = app.queues()
    workers = store.worker_live_by_queue(DEFAULT_ALIVE_SECONDS)
    tasks = store.stats_figures()
    active = [
        *app.jobs(state=JobState.RUNNING, limit=running_limit),
        *app.jobs(state=JobState.WAITING, limit=running_limit),
    ]
    limits = app.limit_overview()
    if as_json:
        print_json(
            {
                "now": now,
                "queues": [
                    queue_document(queue, now, workers.get(queue.name, 0)) for queue in queues
                ],
                "tasks": [task_document(figures) for figures in tasks],
                "active_jobs": [job_document(job, settings.app) for job in active],
                "limits": [limit_document(overview) for overview in limits],
            }
        )
        return
    rows = [_queue_row(queue, now, workers.get(queue.name, 0)) for queue in queues]
    console.print(fitted_table(QUEUE_COLUMNS, rows))
    if tasks:
        console.print(fitted_table(TASK_COLUMNS, [_task_row(figures) for figures in tasks]))
    if limits:
        console.print(limits_table(limits))
    if active:
        console.print(progress_table(active))


def _queue_row(queue: QueueOverview, now: datetime, workers: int) -> list[Text | str]:
    return [
        queue.name,
        queue.shown("queued"),
        queue.shown("due"),
        queue.shown("running"),
        queue.shown("waiting"),
        queue.shown("retrying"),
        Text(queue.shown("failed"), style="red") if queue.failed else "0",
        Text(str(queue.stuck), style="red") if queue.stuck else "0",
        age_text(queue, now),
        Text("0", style="red") if queue.due and not workers else str(workers),
        Text("yes", style="yellow") if queue.paused else "",
    ]


def _task_row(figures: TaskFigures) -> list[Text | str]:
    hour = figures.window("1h")
    counts = hour.counts
    percentiles = hour.percentiles()

    def alarming(name: str) -> Text | str:
        count = counts.get(name, 0)
        return Text(str(count), style="red") if count else "0"

    return [
        figures.task,
        figures.queue,
        str(counts.get("succeeded", 0)),
        alarming("warned"),
        alarming("failed"),
        str(counts.get("retried", 0)),
        alarming("rescued"),
        *(bound_text(percentiles[p]) for p in ("p50", "p95", "p99")),
        str(figures.window("total").counts.get("succeeded", 0)),
    ]


def bound_text(seconds: float | None) -> str:
    """A percentile: at most the bound of its bucket."""
    if seconds is None:
        return ""
    if seconds == math.inf:
        return f">{seconds_text(DURATION_BUCKETS[-1])}"
    return f"≤{seconds_text(seconds)}" if seconds >= 1 else f"≤{seconds * 1000:g}ms"


def age_text(queue: QueueOverview, now: datetime) -> str:
    if queue.oldest_due_at is None:
        return ""
    return seconds_text(max(0.0, (now - queue.oldest_due_at).total_seconds()))


def progress_table(jobs: list[Job]) -> Table:
    rows = []
    for job in jobs:
        done, total, message = progress_of(job)
        rows.append(
            [
                str(job.id),
                job.task,
                Text("stuck", style="red") if job.stuck else job.state.value,
                ProgressBar(total=total, completed=done, width=30) if total else "",
                f"{done:g}/{total:g}" if total else (f"{done:g}" if done else ""),
                message,
            ]
        )
    return fitted_table(ACTIVE_COLUMNS, rows)


FORCE_HELP = "Even a queue that no task, job, worker or schedule uses (a new one)."


@main.command()
@click.argument("queue", required=False)
@click.option("--group", type=int, help="Instead of a queue: the pieces of this parent job.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.pass_obj
@reports_errors
def pause(settings: Settings, queue: str | None, group: int | None, force: bool) -> None:
    """Stop starting a queue's jobs (or a parent's pieces); running ones finish.
    Durable until `due resume`."""
    if group is not None:
        settings.app.pause_group(group)
        console.print(f"pieces of job {group} are paused")
    else:
        settings.app.pause_queue(_queue(queue), force=force)
        console.print(f"queue {queue} is paused")


@main.command()
@click.argument("queue", required=False)
@click.option("--group", type=int, help="Instead of a queue: the pieces of this parent job.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.pass_obj
@reports_errors
def resume(settings: Settings, queue: str | None, group: int | None, force: bool) -> None:
    """Start a paused queue's jobs (or a parent's pieces) again."""
    if group is not None:
        settings.app.resume_group(group)
        console.print(f"pieces of job {group} are resumed")
    else:
        settings.app.resume_queue(_queue(queue), force=force)
        console.print(f"queue {queue} is resumed")


def _queue(queue: str | None) -> str:
    if queue is None:
        raise click.UsageError("name a QUEUE, or give --group PARENT_ID")
    return queue
