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
from due.worker.settings import DEFAULT_CONCURRENCY

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
            errors.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
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


@main.command()
@click.option(
    "-q",
    "--queue",
    "queues",
    multiple=True,
    metavar="NAME[=N]",
    help="A queue to serve, with its concurrency (repeat). Default: every queue "
    "of the app's tasks.",
)
@click.option(
    "-c",
    "--concurrency",
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Concurrency of queues given without =N.",
)
@click.option("--lease", default="10s", show_default=True, help="Lease length (>= 2s).")
@click.option(
    "--grace",
    default="30s",
    show_default=True,
    help="At shutdown, how long running jobs may finish before they are released.",
)
@click.option(
    "--processes",
    default=1,
    show_default=True,
    help="Run this many worker processes under a supervisor that restarts them.",
)
@click.option(
    "--unknown-task-grace",
    default="1h",
    show_default=True,
    help="How long a job of a task no worker knows waits before it is failed.",
)
@click.option(
    "--max-lost-leases",
    default=3,
    show_default=True,
    help="Fail a job whose worker died this many times in a row while running it.",
)
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("--log-level", default="info", show_default=True)
@click.pass_obj
@reports_errors
def worker(
    settings: Settings,
    queues: tuple[str, ...],
    concurrency: int,
    lease: str,
    grace: str,
    processes: int,
    unknown_task_grace: str,
    max_lost_leases: int,
    log_format: str,
    log_level: str,
) -> None:
    """Run jobs: `due worker --app myapp:app -q emails=16 -q bulk=2`."""
    from due.worker.main import configure_logging, run_worker
    from due.worker.settings import WorkerSettings
    from due.worker.supervisor import Supervisor

    if not settings.app_spec:
        raise ConfigurationError("due worker needs your app: --app module:attribute (or DUE_APP)")
    configure_logging(log_format, log_level)
    if processes > 1:
        child = [sys.executable, "-m", "due", "--app", settings.app_spec]
        if settings.url:
            child += ["--url", settings.url]
        child += [
            "worker",
            "--concurrency",
            str(concurrency),
            "--lease",
            lease,
            "--grace",
            grace,
            "--unknown-task-grace",
            unknown_task_grace,
            "--max-lost-leases",
            str(max_lost_leases),
            "--log-format",
            log_format,
            "--log-level",
            log_level,
        ]
        for queue in queues:
            child += ["-q", queue]
        sys.exit(Supervisor(child, processes).run())
    app = settings.app
    worker_settings = WorkerSettings.build(
        parse_queues(queues, concurrency, app.tasks.queues()),
        lease=lease,
        grace=grace,
        unknown_task_grace=unknown_task_grace,
        max_lost_leases=max_lost_leases,
    )
    sys.exit(run_worker(app, worker_settings))


def parse_queues(
    given: tuple[str, ...], concurrency: int, task_queues: list[str]
) -> dict[str, int]:
    """`-q emails=16 -q bulk` → {"emails": 16, "bulk": concurrency}."""
    if not given:
        if not task_queues:
            raise ConfigurationError("the app has no tasks, so no queue to serve; add -q NAME")
        return dict.fromkeys(task_queues, concurrency)
    queues: dict[str, int] = {}
    for item in given:
        name, _, count = item.partition("=")
        try:
            queues[name] = int(count) if count else concurrency
        except ValueError:
            raise ConfigurationError(
                f"-q {item!r}: the concurrency after '=' must be a whole number"
            ) from None
    return queues


@main.command()
@click.option("-n", "--limit", default=50, show_default=True)
@click.pass_obj
@reports_errors
def workers(settings: Settings, limit: int) -> None:
    """List worker processes: where, what they serve, and when they last reported."""
    table = Table("id", "state", "queues", "started", "last seen")
    for info in settings.app.store.list_workers(limit):
        queues = ", ".join(f"{q}={n}" for q, n in sorted(info.queues.items()))
        table.add_row(info.id, info.state, queues, _time(info.started_at), _time(info.last_seen_at))
    console.print(table)


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
