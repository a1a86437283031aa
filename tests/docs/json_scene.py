"""A small world on SQLite whose `--json` documents the reference shows.

A report that succeeded (a run of a schedule), another counted against a
limit, two more as a workflow's steps, an email that failed, a batch waiting
for its pieces, a worker registered: so that every document, and every list
in it, has something in it. `python -m tests.docs.json_scene` prints each
command and its example, as docs/reference/json.md shows them (to paste there
when a document gains a key).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import due
from due.cli import main
from due.core.records import WorkerRegistration
from due.testing import drain


def build(folder: Path) -> tuple[str, int]:
    """The world, in folder/due.db: its URL, and the failed job's id."""
    url = f"sqlite:///{folder / 'due.db'}"
    with due.App(url) as app:
        app.limit("reports", concurrency=2)

        @app.task(name="reports.build", queue="reports", limits=["reports"])
        def build_report(month: str) -> dict[str, int]:
            return {"rows": 1200}

        @app.task(name="emails.send", queue="emails", retry=due.Retry(max_attempts=1))
        def send_email(user_id: int) -> None:
            raise ConnectionError("smtp.example.com refused the connection")

        app.schedule("monthly-report", cron="0 6 1 * *", task=build_report, args=["2026-11"])
        app.migrate()
        app.sync_schedules()
        app.trigger_schedule("monthly-report")
        failed = send_email.enqueue(42)
        build_report.enqueue("2026-12")  # started against its limit
        app.chain(build_report.request("2026-07"), build_report.request("2026-08"), name="summer")
        drain(app)
        app.batch(build_report, [("2026-09",), ("2026-10",)])
        registration = WorkerRegistration(
            "web-1:4242:1f2e", "web-1", 4242, {"reports": 2, "emails": 8}, app.tasks.names()
        )
        app.store.worker_register(registration)
        return url, failed.id


def commands(job_id: int) -> list[list[str]]:
    """Every command that prints a JSON document, as the page shows them."""
    return [
        ["status", "--json"],
        ["jobs", "--json", "-s", "failed"],
        ["show", "--json", str(job_id)],
        ["schedules", "--json"],
        ["schedule", "runs", "monthly-report", "--json"],
        ["schedule", "runs", "monthly-report", "--window", "24h", "--json"],
        ["workers", "--json"],
        ["limit", "--json"],
        ["workflows", "--json"],
        ["workflow", "show", "--json", "1"],
        ["check", "--json"],
    ]


def document(url: str, command: list[str]) -> Any:
    """What `due COMMAND` prints, read as JSON (`due check` exits with its status)."""
    result = CliRunner().invoke(main, ["--url", url, *command])
    assert result.exit_code == 0 or command[0] == "check", result.output
    return json.loads(result.stdout)


def shown(value: Any, indent: str = "") -> str:
    """JSON as the page shows it: what fits on a line on one line, floats rounded."""
    if isinstance(value, float):
        return json.dumps(float(f"{value:.4g}"))
    flat = json.dumps(value, default=str)
    if not isinstance(value, dict | list) or len(indent) + len(flat) <= 76:
        return json.dumps(_rounded(value))
    inner = indent + "  "
    if isinstance(value, list):
        items = [inner + shown(item, inner) for item in value]
        return "[\n" + ",\n".join(items) + f"\n{indent}]"
    pairs = [f"{inner}{json.dumps(key)}: {shown(item, inner)}" for key, item in value.items()]
    return "{\n" + ",\n".join(pairs) + f"\n{indent}}}"


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/emails.py", line 14, in send_email\n'
    '    raise ConnectionError("smtp.example.com refused the connection")\n'
    "ConnectionError: smtp.example.com refused the connection\n"
)


def for_page(command: list[str], document: Any) -> Any:
    """A document as the page shows it: the status with one queue and one task, a
    traceback without this machine's paths (the keys stay the same)."""
    if command[0] == "status":
        document["queues"] = [q for q in document["queues"] if q["name"] == "reports"]
        document["tasks"] = [t for t in document["tasks"] if t["task"] == "reports.build"]
    jobs = document.get("jobs", []) + ([document["job"]] if "job" in document else [])
    for job in jobs:
        for error in job["errors"]:
            error["traceback"] = TRACEBACK
    return document


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        url, job_id = build(Path(folder))
        for command in commands(job_id):
            example = shown(for_page(command, document(url, command)))
            sys.stdout.write(f"### `due {' '.join(command)}`\n\n```json\n{example}\n```\n\n")
