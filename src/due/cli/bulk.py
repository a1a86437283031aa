"""`due retry` and `due cancel` given a filter instead of ids: how many jobs
match and a few of them, then the action, only when confirmed (`--yes`, or a
yes at the terminal's prompt). `due jobs` takes the same filter options, so
what it lists is what the action would act on."""

from __future__ import annotations

import contextlib
import getpass
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from due import job_filters
from due.app import App
from due.cli.output import Column, console, counted, errors, fitted_table, time_text
from due.core.jobs import Job, JobState
from due.errors import ConfigurationError

SAMPLE = 5
SAMPLE_COLUMNS = [
    Column("id", justify="right"),
    Column("task"),
    Column("queue", drop_rank=2),
    Column("state"),
    Column("ended or created", drop_rank=1),
    Column("last error", drop_rank=0),
]
TIME_HELP = (
    "a duration before now ('30m', '2h', '1d') or a time with its offset "
    "('2026-12-05T10:02:00+00:00'); a job's time is when it ended, or when it "
    "was created if it has not ended"
)


def filter_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The filter `due jobs`, `due retry` and `due cancel` share (all but --state)."""
    options = [
        click.option(
            "-t",
            "--task",
            help="Only this task's jobs, by its full name (one no task has is refused, "
            "with the closest).",
        ),
        click.option("-q", "--queue", help="Only this queue's jobs."),
        click.option("--since", help=f"Only jobs whose time is this or later: {TIME_HELP}."),
        click.option("--until", help="Only jobs whose time is before this (as --since)."),
        click.option("--error-contains", help="Only jobs whose last error contains this text."),
        click.option("--key-prefix", help="Only jobs whose key starts with this text."),
        click.option("-p", "--parent", type=int, help="Only the pieces of this parent job."),
        click.option("--workflow", type=int, help="Only the steps of this workflow."),
        click.option(
            "--args-contains",
            metavar="JSON",
            help="Only jobs whose arguments hold this JSON object, e.g. '{\"customer_id\": 42}' "
            "(keyword arguments, or one positional argument that is an object).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def refuse_an_unknown_task(app: App, filters: dict[str, Any]) -> None:
    """For a filter that matched no job: refuse it when its `--task` names no
    task due knows, with the closest names (a misspelt name made an empty
    table, or a bulk action that did nothing, and exit 0)."""
    problem = job_filters.unknown_task(app, filters.get("task"))
    if problem is not None:
        raise ConfigurationError(f"--task: {problem}")


def actor() -> str:
    """Who acts, as the history records it: `cli:<user>`."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:unknown"


def act_on_filter(
    app: App,
    action: str,
    filters: dict[str, Any],
    states: Sequence[JobState],
    *,
    yes: bool,
    dry_run: bool,
    **extra: Any,
) -> None:
    """Count and show what `filters` match, then `app.<action>_many` if confirmed."""
    act = getattr(app, f"{action}_many")
    state = states[0] if len(states) == 1 else None
    matching = act(**filters, state=state, dry_run=True, **extra)
    if matching == 0:
        refuse_an_unknown_task(app, filters)
        console.print(f"no job to {action} matches")
        return
    verb = "matches" if matching == 1 else "match"
    console.print(f"{counted(matching, 'job')} to {action} {verb}")
    _print_sample(app, filters, states, matching)
    if dry_run:
        return
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigurationError(
                f"give --yes to {action} them (no terminal to confirm on), or --dry-run to count"
            )
        click.confirm(f"{action.capitalize()} {counted(matching, 'job')}?", abort=True)
    by = actor()
    doing = {"retry": "retrying", "cancel": "cancelling"}[action]
    with _stopped_between_batches() as stop_if_asked:

        def run(show: Callable[[int], None]) -> int:
            def on_batch(done: int) -> None:
                show(done)
                stop_if_asked()

            return int(act(**filters, state=state, by=by, on_batch=on_batch, **extra))

        done = _with_progress(doing, matching, run)
    said = {"retry": "retried (queued again)", "cancel": "cancelled or asked to stop"}[action]
    console.print(f"{counted(done, 'job')} {said}")


@contextlib.contextmanager
def _stopped_between_batches() -> Iterator[Callable[[], None]]:
    """Ctrl-C during the action stops it once the batch in flight has committed
    and been counted: raised inside that commit, it left the batch out of the
    count the history records, though its jobs had been acted on. A second
    Ctrl-C stops at once. Yields the check to make after each batch."""
    asked = threading.Event()

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()
        errors.print("stopping after this batch (Ctrl-C again: at once)")

    def stop_if_asked() -> None:
        if asked.is_set():
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield stop_if_asked  # (signals reach the main thread only: as it was)
        return
    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield stop_if_asked
    finally:
        signal.signal(signal.SIGINT, previous)


def _print_sample(
    app: App, filters: dict[str, Any], states: Sequence[JobState], matching: int
) -> None:
    jobs: list[Job] = []
    for state in states:
        jobs += app.jobs(**filters, state=state, limit=SAMPLE - len(jobs))
    rows = [
        [
            str(job.id),
            job.task,
            job.queue,
            job.state.value,
            time_text(job.finished_at or job.created_at),
            job.last_error or "",
        ]
        for job in jobs
    ]
    console.print(fitted_table(SAMPLE_COLUMNS, rows))
    if matching > len(jobs):
        console.print(f"and {matching - len(jobs)} more")


def _with_progress(doing: str, total: int, run: Callable[[Callable[[int], None]], int]) -> int:
    """`run(on_batch)`, with a progress bar on a terminal (on standard error)."""
    if not errors.is_terminal:
        return run(lambda _: None)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=errors, transient=True) as progress:
        bar = progress.add_task(doing, total=total)
        return run(lambda done: progress.update(bar, completed=done))
