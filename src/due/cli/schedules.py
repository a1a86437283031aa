"""`due schedules` and `due schedule add|pause|resume|trigger|remove|prune|runs`."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.text import Text

from due.cli.common import Settings, reports_errors
from due.cli.documents import (
    expected_run_document,
    schedule_document,
    schedule_run_document,
)
from due.cli.jobs import JSON_HELP
from due.cli.main import main
from due.cli.output import Column, console, fitted_table, print_json, seconds_text, time_text
from due.core.schedules import DEFAULT_MISFIRE, DEFAULT_OVERLAP, Misfire, Overlap, schedule_problem
from due.errors import ConfigurationError
from due.visibility.schedule_health import NOT_RECORDED

SCHEDULE_COLUMNS = [
    Column("name"),
    Column("when"),
    Column("task", drop_rank=2),
    Column("next run"),
    Column("last run", drop_rank=3),
    Column("outcome"),
    Column("last success", drop_rank=4),
    Column("skipped", justify="right", drop_rank=1),
    Column("missed", justify="right", drop_rank=0),
    Column("state"),
]
RUN_COLUMNS = [
    Column("scheduled for"),
    Column("outcome"),
    Column("job", justify="right"),
    Column("job state"),
    Column("reason", drop_rank=0),
]
EXPECTED_COLUMNS = [
    Column("scheduled for"),
    Column("what became of it"),
    Column("job", justify="right"),
    Column("job state"),
    Column("ran", justify="right", drop_rank=1),
    Column("reason", drop_rank=0),
]


@main.command()
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def schedules(settings: Settings, as_json: bool) -> None:
    """Every schedule: when it runs next, how its last run went, what was skipped or missed."""
    overviews = settings.app.schedules()
    now = settings.app.store.now()
    for overview in overviews:  # found by no scheduler yet: said all the same
        stored = overview.stored
        stored.problem = stored.problem or schedule_problem(stored.schedule, now)
    if as_json:
        print_json({"schedules": [schedule_document(overview) for overview in overviews]})
        return
    rows = []
    for overview in overviews:
        stored = overview.stored
        state = "paused" if stored.paused else ("enabled" if stored.enabled else "disabled")
        if stored.enabled and stored.problem:
            state = "cannot fire"
        rows.append(
            [
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
            ]
        )
    console.print(fitted_table(SCHEDULE_COLUMNS, rows))


@main.group()
def schedule() -> None:
    """Schedules at run time: add, pause, resume, trigger, remove, prune, runs."""


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def list_schedules(ctx: click.Context, as_json: bool) -> None:
    """The same table as `due schedules`."""
    ctx.invoke(schedules, as_json=as_json)


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
    help="Times missed while nothing ran: skip them, catch up each, or run the latest once.",
)
@click.option(
    "--overlap",
    type=click.Choice([o.value for o in Overlap]),
    default=DEFAULT_OVERLAP.value,
    show_default=True,
    help="A time that comes while the last run goes on: allow, forbid (skip), queue, replace.",
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
    """Start runs again from the next scheduled time."""
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


@schedule.command("prune")
@click.pass_obj
@reports_errors
def prune(settings: Settings) -> None:
    """Disable the schedules stored as defined in code that the app (--app) no longer
    defines; their history stays. Run it once every worker runs that code: a worker
    starting never disables one (during a rolling deploy it may be newer code's)."""
    pruned = settings.require_app("due schedule prune").prune_schedules()
    if not pruned:
        console.print("nothing to prune: every enabled code schedule is defined in the app")
    for name in pruned:
        console.print(f"schedule {name!r} disabled (no longer defined in the code)")


@schedule.command("runs")
@click.argument("name")
@click.option("-n", "--limit", default=30, show_default=True, help="At most this many times.")
@click.option(
    "--window",
    default=None,
    help="Expected against actual: every time the schedule called for in this window "
    "(e.g. 24h), oldest first, and what became of each, recorded or not.",
)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def runs(settings: Settings, name: str, limit: int, window: str | None, as_json: bool) -> None:
    """Each scheduled time, newest first: enqueued (and the job's state), skipped, missed."""
    if window is not None:
        _expected(settings, name, window, as_json)
        return
    listed = settings.app.schedule_runs(name, limit)
    if as_json:
        print_json({"runs": [schedule_run_document(run) for run in listed]})
        return
    rows = [
        [
            time_text(run.scheduled_for),
            run.outcome,
            str(run.job_id or ""),
            run.job_state or "",
            run.reason or "",
        ]
        for run in listed
    ]
    console.print(fitted_table(RUN_COLUMNS, rows))


def _expected(settings: Settings, name: str, window: str, as_json: bool) -> None:
    listed = settings.app.schedule_health(name, window)
    if as_json:
        print_json({"expected": [expected_run_document(run) for run in listed]})
        return
    rows = [
        [
            time_text(run.scheduled_for),
            Text(run.outcome, style="red") if run.outcome == NOT_RECORDED else run.outcome,
            str(run.job_id or ""),
            run.job_state or "",
            "" if run.seconds is None else seconds_text(run.seconds),
            run.reason or ("" if run.expected else "not a scheduled time (triggered by hand)"),
        ]
        for run in listed
    ]
    console.print(fitted_table(EXPECTED_COLUMNS, rows))


def _json(text: str, kind: type, option: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{option}: not valid JSON ({error})") from None
    if not isinstance(value, kind):
        raise ConfigurationError(f"{option}: expected a JSON {kind.__name__}")
    return value
