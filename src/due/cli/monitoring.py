"""`due check` (alerts, with monitoring-plugin exit codes) and `due metrics`
(Prometheus)."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from due.cli.common import Settings
from due.cli.jobs import JSON_HELP
from due.cli.main import main
from due.cli.output import counted, iso, print_json, terminal_safe
from due.durations import to_seconds
from due.errors import DueError
from due.visibility.alerts import evaluate, worst
from due.visibility.snapshot import take

UNKNOWN = 3
"""The monitoring-plugin exit code for "could not tell" (the database is out of
reach, a bad option)."""


@main.command()
@click.option(
    "--oldest-due-warning",
    default=None,
    help="Warn when a queue's oldest due job has waited longer (default 1m; a queue "
    "declared with app.queue(...) keeps its own).",
)
@click.option(
    "--oldest-due-critical",
    default=None,
    help="Critical when a queue's oldest due job has waited longer (default 5m).",
)
@click.option(
    "--failures-window",
    default="1h",
    show_default=True,
    help="How far back jobs failed for good alert. Results that failed their task's "
    "check= alert over the last hour whatever this says: they are counted only in the "
    "per-minute figures, whose recent windows are fixed.",
)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
def check(
    settings: Settings,
    oldest_due_warning: str | None,
    oldest_due_critical: str | None,
    failures_window: str,
    as_json: bool,
) -> None:
    """Print every active alert, one line each, and exit 0 (ok), 1 (warning) or
    2 (critical); 3 when the state could not be read. For cron, Kubernetes
    probes and Nagios. With --app, also warn about a schedule stored as defined
    in code that the app does not define (its module is not imported by the app
    module, or it was dropped and not pruned)."""
    try:
        app = settings.app
        window = to_seconds(failures_window, what="--failures-window")
        rules = app.alert_rules(
            oldest_due_warning=oldest_due_warning,
            oldest_due_critical=oldest_due_critical,
            judge_schedules=settings.names_an_app,  # the workers' code is loaded
        )
        snapshot = take(app, window)
    except DueError as error:
        if as_json:
            print_json({"status": "unknown", "exit_code": UNKNOWN, "error": str(error)})
        else:
            click.echo(terminal_safe(f"UNKNOWN: {error}"))
        sys.exit(UNKNOWN)
    alerts = evaluate(snapshot, rules)
    severity = worst(alerts)
    if as_json:
        print_json(
            {
                "status": severity.name.lower(),
                "exit_code": int(severity),
                "at": iso(snapshot.at),
                "alerts": [
                    {
                        "severity": alert.severity.name.lower(),
                        "kind": alert.kind,
                        "subject": alert.subject,
                        "message": alert.message,
                    }
                    for alert in alerts
                ],
            }
        )
    elif alerts:
        for alert in alerts:
            click.echo(terminal_safe(alert.line()))
    else:
        live = sum(1 for worker in snapshot.workers if worker.state == "running")
        counts = (
            counted(len(snapshot.queues), "queue"),
            counted(len(snapshot.schedules), "schedule"),
            counted(live, "running worker"),
        )
        click.echo(f"OK: nothing to alert on ({', '.join(counts)})")
    sys.exit(int(severity))


@main.command()
@click.option("--port", default=9464, show_default=True, help="Serve /metrics on this port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen on this address.")
@click.option(
    "--allow-host",
    "allowed",
    multiple=True,
    metavar="NAME",
    help="A host name Prometheus scrapes it by (again for more). Bound to 127.0.0.1 it "
    "answers only loopback names and these; bound elsewhere, any address, and once one "
    "is given, only these names (a defence against DNS rebinding).",
)
@click.pass_obj
def metrics(settings: Settings, port: int, host: str, allowed: tuple[str, ...]) -> None:
    """Serve the figures for Prometheus on http://HOST:PORT/metrics, read from the
    database at each scrape (run as many as you like, anywhere)."""
    from due.visibility.metrics import registry_for
    from due.visibility.metrics_server import serve

    try:
        app = settings.app
        app.store.check_schema()
        registry = registry_for(app)
        server, thread = serve(registry, host, port, allowed)
    except (DueError, OSError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    click.echo(f"serving metrics on http://{host}:{server.server_port}/metrics", err=True)
    stop = threading.Event()

    def stop_serving(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stop_serving)
    signal.signal(signal.SIGINT, stop_serving)
    stop.wait()
    server.shutdown()
    thread.join(5)
