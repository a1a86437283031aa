"""`due migrate`, `due jobs`, `due show`, `due cancel`, `due retry`."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from due.cli.bulk import act_on_filter, filter_options, refuse_an_unknown_task
from due.cli.common import Settings, reports_errors
from due.cli.documents import job_document
from due.cli.main import main
from due.cli.output import (
    Column,
    console,
    fitted_table,
    json_text,
    print_json,
    print_verbatim,
    time_text,
)
from due.cli.progress import progress_of
from due.core.jobs import Job, JobState
from due.core.limits import shown_key
from due.shown_arguments import shown_arguments
from due.store.bulk import CANCELLABLE, RETRYABLE
from due.visibility.limits import limit_wait

JSON_HELP = "Print one JSON document instead of a table (its keys: docs/reference/json.md)."


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


JOB_COLUMNS = [
    Column("id", justify="right"),
    Column("task"),
    Column("queue", drop_rank=3),
    Column("state"),
    Column("attempt", drop_rank=2),
    Column("run at", drop_rank=1),
    Column("progress", drop_rank=4),
    Column("last error", drop_rank=0),
]


@main.command()
@filter_options
@click.option(
    "-s", "--state", type=click.Choice([s.value for s in JobState]), help="Only this state."
)
@click.option("--stuck", is_flag=True, help="Only running jobs whose progress stopped moving.")
@click.option("-n", "--limit", default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def jobs(
    settings: Settings,
    /,
    state: str | None,
    stuck: bool,
    limit: int,
    as_json: bool,
    **filters: Any,
) -> None:
    """List jobs, newest first (delayed jobs are queued with a future run at)."""
    listed = settings.app.jobs(state=state, stuck=stuck, limit=limit, **filters)
    if not listed:
        refuse_an_unknown_task(settings.app, filters)
    if as_json:
        print_json({"jobs": [job_document(job, settings.app) for job in listed]})
        return
    rows = [
        [
            str(job.id),
            job.task,
            job.queue,
            "stuck" if job.stuck else job.state.value,
            f"{job.attempt}/{job.max_attempts}",
            time_text(job.run_at),
            progress_text(job),
            job.last_error or "",
        ]
        for job in listed
    ]
    console.print(fitted_table(JOB_COLUMNS, rows))


@main.command()
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def show(settings: Settings, job_id: int, as_json: bool) -> None:
    """Show one job: its state, times, arguments, result, and every attempt's error."""
    job = settings.app.get(job_id)
    if as_json:
        print_json({"job": job_document(job, settings.app)})
    else:
        _print_job(job, shown_arguments(job, settings.app), limit_wait(settings.app, job))


YES_HELP = "Act without asking (a filter's action asks first on a terminal)."
DRY_RUN_HELP = "Only count and show the jobs the filter matches."


@main.command()
@click.argument("job_ids", metavar="[JOB_ID]...", nargs=-1, type=int)
@filter_options
@click.option(
    "-s",
    "--state",
    type=click.Choice([s.value for s in CANCELLABLE]),
    help="Only this state (default: queued, running and waiting jobs).",
)
@click.option("-y", "--yes", is_flag=True, help=YES_HELP)
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@click.pass_obj
@reports_errors
def cancel(
    settings: Settings,
    /,
    job_ids: tuple[int, ...],
    state: str | None,
    yes: bool,
    dry_run: bool,
    **filters: Any,
) -> None:
    """Cancel jobs: a queued one at once, a running one at its next safe point,
    a waiting parent with its unfinished pieces.

    Give job ids, or a filter: then it says how many jobs match and shows a
    few, and cancels them once confirmed (--yes, or yes at the prompt), a
    batch at a time. Run again, it finishes what an interrupted run left.
    """
    if _filtered("cancel", job_ids, {**filters, "state": state}, yes, dry_run):
        states = [JobState(state)] if state else list(CANCELLABLE)
        act_on_filter(settings.app, "cancel", filters, states, yes=yes, dry_run=dry_run)
        return
    for job_id in job_ids:
        job = settings.app.cancel(job_id)
        if job.state == JobState.RUNNING:
            console.print(f"job {job.id} is asked to stop; it ends at its next safe point")
        else:
            console.print(f"job {job.id} is {job.state.value}")


@main.command()
@click.argument("job_ids", metavar="[JOB_ID]...", nargs=-1, type=int)
@filter_options
@click.option(
    "-s",
    "--state",
    type=click.Choice([s.value for s in RETRYABLE]),
    help="Only this state (default: failed).",
)
@click.option(
    "--now",
    "run_now",
    is_flag=True,
    help="Due at once, even if it was delayed to a later time (default: keep that time).",
)
@click.option("-y", "--yes", is_flag=True, help=YES_HELP)
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@click.pass_obj
@reports_errors
def retry(
    settings: Settings,
    /,
    job_ids: tuple[int, ...],
    state: str | None,
    run_now: bool,
    yes: bool,
    dry_run: bool,
    **filters: Any,
) -> None:
    """Put failed or cancelled jobs back in their queue, with fresh attempts.

    Give job ids, or a filter: then it says how many jobs match and shows a
    few, and retries them once confirmed (--yes, or yes at the prompt), a
    batch at a time. Run again, it finishes what an interrupted run left.
    """
    if _filtered("retry", job_ids, {**filters, "state": state}, yes, dry_run):
        states = [JobState(state or JobState.FAILED)]
        act_on_filter(settings.app, "retry", filters, states, yes=yes, dry_run=dry_run, now=run_now)
        return
    for job_id in job_ids:
        job = settings.app.retry(job_id, now=run_now)
        console.print(f"job {job.id} is {job.state.value} again, due {time_text(job.run_at)}")


def _filtered(
    action: str, job_ids: tuple[int, ...], filters: dict[str, Any], yes: bool, dry_run: bool
) -> bool:
    """Whether the command acts on a filter (else on ids); refuses both, or neither."""
    given = any(value is not None for value in filters.values())
    if job_ids and given:
        raise click.UsageError(f"give job ids or a filter to {action}, not both")
    if job_ids and (yes or dry_run):
        raise click.UsageError("--yes and --dry-run go with a filter, not with job ids")
    if not job_ids and not given:
        raise click.UsageError(
            f"give the ids of the jobs to {action}, or a filter (--task, --queue, --state, "
            "--since, --until, --error-contains, --key-prefix, --parent, --workflow, "
            "--args-contains)"
        )
    return given


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


def limits_text(job: Job) -> str | None:
    """The limits a job counts against: `stripe, account-sync (key acct-7)`."""
    if not job.limits:
        return None
    return ", ".join(name + (f" (key {shown_key(key)})" if key else "") for name, key in job.limits)


def _print_job(
    job: Job, arguments: tuple[list[Any], dict[str, Any]], waits_for: str | None = None
) -> None:
    table = Table(show_header=False, box=None)
    table.add_column(overflow="fold")
    table.add_column(overflow="fold")
    fields: list[tuple[str, Any]] = [
        ("id", job.id),
        ("task", job.task),
        ("queue", job.queue),
        ("state", job.state.value),
        ("priority", job.priority),
        ("attempt", f"{job.attempt}/{job.max_attempts}"),
        ("args", json_text(arguments[0])),
        ("kwargs", json_text(arguments[1])),
        ("key", job.key),
        ("run at", time_text(job.run_at)),
        ("created", time_text(job.created_at)),
        ("started", time_text(job.started_at)),
        ("finished", time_text(job.finished_at)),
        ("worker", job.worker),
        ("result", None if job.result is None else json_text(job.result)),
        ("warning", job.warning),
        ("schedule", job.schedule),
        ("scheduled for", time_text(job.scheduled_for) or None),
        ("parent", job.parent_id),
        ("pieces", pieces_text(job)),
        ("progress", progress_text(job)),
        ("checkpoint", None if job.checkpoint is None else json_text(job.checkpoint)),
        ("stuck", "yes: its progress stopped moving" if job.stuck else None),
        ("held", "yes: its group is paused" if job.held else None),
        ("limits", limits_text(job)),
        ("limit wait", waits_for),
    ]
    for name, value in fields:
        table.add_row(name, "" if value is None else str(value))
    console.print(table)
    for error in job.errors:
        when = time_text(error.at)
        console.print(f"attempt {error.attempt} ({error.kind}, {when}): {error.error}")
        if error.traceback:
            print_verbatim(error.traceback)
