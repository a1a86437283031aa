"""`due worker`, `due scheduler`, `due workers`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from due.cli.common import Settings, reports_errors
from due.cli.documents import worker_document
from due.cli.jobs import JSON_HELP
from due.cli.main import main
from due.cli.output import Column, console, fitted_table, print_json, time_text
from due.errors import ConfigurationError
from due.lookups import list_limit
from due.redaction import redact_url
from due.worker.event_loop import DEFAULT_LOOP, LOOPS
from due.worker.settings import DEFAULT_CONCURRENCY, WorkerSettings
from due.worker.supervisor import SLOT_ENVIRONMENT_VARIABLE

LOG_LEVELS = ["debug", "info", "warning", "error", "critical"]


def _options(command: Callable[..., Any], options: list[Callable[..., Any]]) -> Callable[..., Any]:
    for option in reversed(options):
        command = option(command)
    return command


def job_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options of a process that runs jobs."""
    return _options(
        command,
        [
            click.option(
                "--lease",
                default="10s",
                show_default=True,
                help="How long a job is held between heartbeats (>= 2s); a dead worker's "
                "jobs run elsewhere within it.",
            ),
            click.option(
                "--grace",
                default="30s",
                show_default=True,
                help="At shutdown, how long running jobs may finish before they are released.",
            ),
        ],
    )


def scheduler_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options of every process that runs a scheduler (a worker, or a lone scheduler)."""
    return _options(
        command,
        [
            click.option(
                "--leader-url",
                default=None,
                help="Keep the scheduler's leader lease in Redis (redis://...) instead of the "
                "database; needs due[redis].",
            ),
            click.option(
                "--leader-ttl",
                default="10s",
                show_default=True,
                help="The scheduler's leader lease: a dead leader is replaced within this.",
            ),
            click.option(
                "--retention-succeeded",
                default="7d",
                show_default=True,
                help="The leader prunes succeeded jobs older than this (their counts stay).",
            ),
            click.option(
                "--retention-failed",
                default="30d",
                show_default=True,
                help="The leader prunes failed and cancelled jobs (and schedule history) "
                "older than this.",
            ),
            click.option(
                "--retention",
                default=None,
                help="Both retentions at once (overridden by either of the two above).",
            ),
            click.option(
                "--loop",
                "event_loop",
                type=click.Choice(LOOPS),
                default=DEFAULT_LOOP,
                show_default=True,
                help="The event loop: uvloop when installed (auto), or asyncio's own.",
            ),
            click.option(
                "--log-format",
                type=click.Choice(["text", "json"]),
                default="text",
                show_default=True,
                help="Logs as text lines, or one JSON object per line.",
            ),
            click.option(
                "--log-level",
                type=click.Choice(LOG_LEVELS, case_sensitive=False),
                default="info",
                show_default=True,
                help="The least severe log lines to print (info: one line per job end).",
            ),
        ],
    )


@main.command()
@click.option(
    "-q",
    "--queue",
    "queues",
    multiple=True,
    metavar="NAME[=N]",
    help="A queue to serve, with its concurrency (repeat). Default: every queue of the app's "
    "tasks.",
)
@click.option(
    "-c",
    "--concurrency",
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Concurrency of queues given without =N.",
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
    "--max-jobs-per-process",
    type=int,
    default=None,
    help="Recycle a worker process after this many jobs: it stops claiming, lets its jobs "
    "finish within --grace, and exits (code 75); --processes starts another at once.",
)
@click.option(
    "--max-memory-per-process",
    default=None,
    metavar="SIZE",
    help="Recycle a worker process whose resident memory passes SIZE (500MB, 1GiB), "
    "as --max-jobs-per-process does.",
)
@click.option(
    "--health-port",
    type=int,
    default=None,
    help="Serve GET /livez and /readyz on this port, all interfaces (with --processes, "
    "child i on PORT+i).",
)
@click.option(
    "--scheduler/--no-scheduler",
    default=True,
    show_default=True,
    help="Run the scheduler in this process too (it acts only while it leads).",
)
@job_options
@scheduler_options
@click.pass_obj
@reports_errors
def worker(
    settings: Settings,
    queues: tuple[str, ...],
    concurrency: int,
    processes: int,
    unknown_task_grace: str,
    max_lost_leases: int,
    max_jobs_per_process: int | None,
    max_memory_per_process: str | None,
    health_port: int | None,
    scheduler: bool,
    lease: str,
    grace: str,
    leader_url: str | None,
    leader_ttl: str,
    retention_succeeded: str,
    retention_failed: str,
    retention: str | None,
    event_loop: str,
    log_format: str,
    log_level: str,
) -> None:
    """Run jobs: `due worker --app myapp:app -q emails=16 -q bulk=2`."""
    from due.worker.main import configure_logging, run_worker
    from due.worker.supervisor import Supervisor

    app = settings.require_app("due worker")
    configure_logging(log_format, log_level)
    limits: dict[str, Any] = {
        "max_jobs": max_jobs_per_process,
        "max_memory": max_memory_per_process,
        "health_port": _health_port(health_port),
    }
    if processes > 1:
        WorkerSettings.build({}, scheduler=True, **limits)  # refused here, not in each child
        sys.exit(Supervisor(_child_command(), processes).run())
    worker_settings = WorkerSettings.build(
        parse_queues(queues, concurrency, app.tasks.queues()),
        lease=lease,
        grace=grace,
        unknown_task_grace=unknown_task_grace,
        max_lost_leases=max_lost_leases,
        **_retentions(retention, retention_succeeded, retention_failed),
        scheduler=scheduler,
        leader_url=_leader_url(leader_url),
        leader_ttl=leader_ttl,
        event_loop=event_loop,
        **limits,
    )
    sys.exit(run_worker(app, worker_settings))


@main.command()
@scheduler_options
@click.pass_obj
@reports_errors
def scheduler(
    settings: Settings,
    leader_url: str | None,
    leader_ttl: str,
    retention_succeeded: str,
    retention_failed: str,
    retention: str | None,
    event_loop: str,
    log_format: str,
    log_level: str,
) -> None:
    """Run the scheduler alone (no jobs): materialise schedules while leading."""
    from due.worker.main import configure_logging, run_worker

    app = settings.require_app("due scheduler")
    configure_logging(log_format, log_level)
    scheduler_settings = WorkerSettings.build(
        {},
        **_retentions(retention, retention_succeeded, retention_failed),
        scheduler=True,
        leader_url=_leader_url(leader_url),
        leader_ttl=leader_ttl,
        event_loop=event_loop,
    )
    sys.exit(run_worker(app, scheduler_settings))


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _leader_url(url: str | None) -> str | None:
    """Checked here, where it is typed: Redis's own refusal came as a traceback
    at the worker's start."""
    if url is not None and not url.startswith(REDIS_SCHEMES):
        raise ConfigurationError(
            f"--leader-url {redact_url(url)!r} is not a Redis URL: give "
            "redis://[:password@]host[:port][/db], rediss://... (TLS) or unix://path"
        )
    return url


def _health_port(port: int | None) -> int | None:
    """--health-port, plus this process's slot under a supervisor (0 stays 0: any)."""
    slot = int(os.environ.get(SLOT_ENVIRONMENT_VARIABLE, "0"))
    return port + slot if port else port


def _child_command() -> list[str]:
    """This same command line without --processes: one supervised worker."""
    kept: list[str] = []
    arguments = iter(sys.argv[1:])
    for argument in arguments:
        if argument == "--processes":
            next(arguments, None)
        elif not argument.startswith("--processes="):
            kept.append(argument)
    # -P: without the working directory first on its path, which -m puts there
    # (load_app searches it last, after what is installed).
    return [sys.executable, "-P", "-m", "due", *kept]


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


WORKER_COLUMNS = [
    Column("id"),
    Column("state"),
    Column("host", drop_rank=1),
    Column("pid", justify="right", drop_rank=0),
    Column("queues"),
    Column("running", justify="right"),
    Column("started", drop_rank=2),
    Column("last seen"),
]


@main.command()
@click.option("-n", "--limit", default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def workers(settings: Settings, limit: int, as_json: bool) -> None:
    """List worker processes, newest first: where, what they serve, when they last
    reported. One silent for 3 leases of the workers that watch it, and at least
    10 s (30 s at the default 10 s lease), is marked gone."""
    store = settings.app.store
    listed = store.worker_list(list_limit(limit, "--limit"))
    running = store.worker_running_counts()
    if as_json:
        print_json({"workers": [worker_document(info, running.get(info.id, 0)) for info in listed]})
        return
    rows = [
        [
            info.id,
            info.state,
            info.host,
            str(info.pid),
            ", ".join(f"{q}={n}" for q, n in sorted(info.queues.items())),
            str(running.get(info.id, 0)),
            time_text(info.started_at),
            time_text(info.last_seen_at),
        ]
        for info in listed
    ]
    console.print(fitted_table(WORKER_COLUMNS, rows))


def _retentions(both: str | None, succeeded: str, failed: str) -> dict[str, Any]:
    """--retention stands for both, unless one is given on its own (not its default)."""
    source = click.get_current_context()
    given = {
        name: value
        for name, value in (("retention_succeeded", succeeded), ("retention_failed", failed))
        if both is None
        or source.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    }
    return {"retention": both, **given} if both is not None else given
