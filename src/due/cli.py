"""The `due` command: migrate, look at jobs, act on them (and, later, run workers)."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from due.app import App
from due.errors import ConfigurationError, DueError
from due.job import Job, JobState

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
errors = Console(stderr=True)


def load_app(spec: str) -> App:
    """Import `module:attribute` (from the working directory too) and return the App."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"--app {spec!r}: write it as module:attribute, e.g. myapp:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"--app {spec!r}: cannot import {module_name!r}: {error}"
        ) from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ConfigurationError(
            f"--app {spec!r}: {module_name}.{attribute} is {type(app).__name__}, not a due.App"
        )
    return app


class Settings:
    def __init__(self, url: str | None, app_spec: str | None) -> None:
        self.url = url
        self.app_spec = app_spec
        self._app: App | None = None

    @property
    def app(self) -> App:
        if self._app is None:
            if self.app_spec is None:
                self._app = App(self.url)
            else:
                self._app = load_app(self.app_spec)
                if self.url and self.url != self._app.url:
                    raise ConfigurationError(
                        f"--app {self.app_spec} uses database {self._app.url!r} but --url "
                        f"(or DUE_DATABASE_URL) says {self.url!r}; give one"
                    )
        return self._app


def reports_errors(command: F) -> F:
    """Print DueErrors as one clear line and exit 1, instead of a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except DueError as error:
            errors.print(f"[red]error:[/red] {error}", highlight=False)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@click.group()
@click.option("--url", envvar="DUE_DATABASE_URL", help="Database URL (default ./due.db).")
@click.option("--app", "app_spec", envvar="DUE_APP", help="Your app, as module:attribute.")
@click.version_option(package_name="due")
@click.pass_context
def main(ctx: click.Context, url: str | None, app_spec: str | None) -> None:
    """due: background jobs, delayed jobs and schedules without quiet failures."""
    ctx.obj = Settings(url, app_spec)


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
@click.option("-n", "--limit", default=50, show_default=True, help="At most this many.")
@click.pass_obj
@reports_errors
def jobs(
    settings: Settings, queue: str | None, state: str | None, task: str | None, limit: int
) -> None:
    """List jobs, newest first (delayed jobs are queued with a future run_at)."""
    table = Table("id", "task", "queue", "state", "attempt", "run at", "last error")
    for job in settings.app.jobs(queue=queue, state=state, task=task, limit=limit):
        table.add_row(
            str(job.id),
            job.task,
            job.queue,
            job.state.value,
            f"{job.attempt}/{job.max_attempts}",
            _time(job.run_at),
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
    """Cancel a queued or delayed job."""
    job = settings.app.cancel(job_id)
    console.print(f"job {job.id} is {job.state.value}")


@main.command()
@click.argument("job_id", type=int)
@click.pass_obj
@reports_errors
def retry(settings: Settings, job_id: int) -> None:
    """Run a failed or cancelled job again."""
    job = settings.app.retry(job_id)
    console.print(f"job {job.id} is {job.state.value} again, due {_time(job.run_at)}")


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
        ("run at", _time(job.run_at)),
        ("created", _time(job.created_at)),
        ("started", _time(job.started_at)),
        ("finished", _time(job.finished_at)),
        ("worker", job.worker),
        ("result", job.result),
    ]
    for name, value in fields:
        table.add_row(name, "" if value is None else str(value))
    console.print(table)
    for error in job.errors:
        console.print(f"[bold]attempt {error.attempt}[/bold] ({error.kind}): {error.error}")
        if error.traceback:
            console.print(error.traceback, highlight=False, markup=False)


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""
