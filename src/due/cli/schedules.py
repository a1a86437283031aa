"""`due schedules` and `due schedule add|pause|resume|trigger|remove|runs`."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from due.cli.common import Settings, console, reports_errors, time_text
from due.cli.main import main
from due.errors import ConfigurationError
from due.scheduler.definition import DEFAULT_MISFIRE, DEFAULT_OVERLAP, Misfire, Overlap


@main.command()
@click.pass_obj
@reports_errors
def schedules(settings: Settings) -> None:
    """Every schedule: when it runs next, how its last run went, what was skipped or missed."""
    table = Table(
        "name",
        "when",
        "task",
        "next run",
        "last run",
        "outcome",
        "last success",
        "skipped",
        "missed",
        "state",
    )
    for overview in settings.app.schedules():
        stored = overview.stored
        state = "paused" if stored.paused else ("enabled" if stored.enabled else "disabled")
        table.add_row(
            stored.name,
            stored.schedule.timing.describe(),
            stored.schedule.task,
            time_text(stored.next_fire_at) if stored.enabled else "",
            time_text(overview.last_run_at),
            overview.last_run_state or "",
            time_text(overview.last_success_at),
            str(overview.skipped),
            str(overview.missed),
            state,
        )
    console.print(table)


@main.group()
def schedule() -> None:
    """Schedules at run time: add, pause, resume, trigger, remove, runs."""


@schedule.command("list")
@click.pass_context
def list_schedules(ctx: click.Context) -> None:
    """The same table as `due schedules`."""
    ctx.invoke(schedules)


@schedule.command("add")
@click.argument("name")
@click.option("--task", required=True, help="The task's name.")
@click.option("--cron", help="A cron expression: 5 fields, or 6 with seconds first.")
@click.option("--every", help="An interval, e.g. 90s, 15m.")
@click.option("--tz", default="UTC", show_default=True, help="Time zone of the cron expression.")
@click.option("--args", "args_json", default="[]", help="Positional arguments, as a JSON list.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments, as a JSON object.")
@click.option(
    "--misfire",
    type=click.Choice([m.value for m in Misfire]),
    default=DEFAULT_MISFIRE.value,
    show_default=True,
)
@click.option(
    "--overlap",
    type=click.Choice([o.value for o in Overlap]),
    default=DEFAULT_OVERLAP.value,
    show_default=True,
)
@click.pass_obj
@reports_errors
def add(
    settings: Settings,
    name: str,
    task: str,
    cron: str | None,
    every: str | None,
    tz: str,
    args_json: str,
    kwargs_json: str,
    misfire: str,
    overlap: str,
) -> None:
    """Add a schedule without deploying code (`--app` must know the task)."""
    args, kwargs = _json(args_json, list, "--args"), _json(kwargs_json, dict, "--kwargs")
    settings.app.add_schedule(
        name,
        cron,
        every,
        task=task,
        args=args,
        kwargs=kwargs,
        tz=tz,
        misfire=misfire,
        overlap=overlap,
    )
    console.print(f"schedule {name!r} added")


@schedule.command("pause")
@click.argument("name")
@click.pass_obj
@reports_errors
def pause(settings: Settings, name: str) -> None:
    """Start no runs; their times are recorded as skipped until resumed."""
    settings.app.pause_schedule(name)
    console.print(f"schedule {name!r} paused")


@schedule.command("resume")
@click.argument("name")
@click.pass_obj
@reports_errors
def resume(settings: Settings, name: str) -> None:
    settings.app.resume_schedule(name)
    console.print(f"schedule {name!r} resumed")


@schedule.command("trigger")
@click.argument("name")
@click.pass_obj
@reports_errors
def trigger(settings: Settings, name: str) -> None:
    """Start a run now."""
    job = settings.app.trigger_schedule(name)
    console.print(f"schedule {name!r}: started job {job.id}")


@schedule.command("remove")
@click.argument("name")
@click.pass_obj
@reports_errors
def remove(settings: Settings, name: str) -> None:
    """Delete a schedule added at run time (its history stays)."""
    settings.app.remove_schedule(name)
    console.print(f"schedule {name!r} removed")


@schedule.command("runs")
@click.argument("name")
@click.option("-n", "--limit", default=30, show_default=True)
@click.pass_obj
@reports_errors
def runs(settings: Settings, name: str, limit: int) -> None:
    """Each scheduled time, newest first: enqueued (and the job's state), skipped, missed."""
    table = Table("scheduled for", "outcome", "job", "job state", "reason")
    for run in settings.app.schedule_runs(name, limit):
        table.add_row(
            time_text(run.scheduled_for),
            run.outcome,
            str(run.job_id or ""),
            run.job_state or "",
            run.reason or "",
        )
    console.print(table)


def _json(text: str, kind: type, option: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{option}: not valid JSON ({error})") from None
    if not isinstance(value, kind):
        raise ConfigurationError(f"{option}: expected a JSON {kind.__name__}")
    return value
