"""`due check` and `due metrics`, run as an operator runs them: in a subprocess,
on a real database, with real time."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import due
from due.core.records import COUNT_LIMIT, WorkerRegistration
from due.testing import drain
from tests.helpers.cli import PLAIN_ENVIRONMENT, run_due, run_due_in
from tests.helpers.tools import need
from tests.helpers.waiting import wait_until
from tests.helpers.workers import REPOSITORY

DOCUMENTED = {
    "due_jobs",
    "due_job_duration_seconds",
    "due_queue_jobs",
    "due_queue_jobs_at_least",
    "due_queue_paused",
    "due_queue_oldest_due_age_seconds",
    "due_schedule_last_success_timestamp_seconds",
    "due_schedule_next_run_timestamp_seconds",
    "due_schedule_missed",
    "due_workers_alive",
    "due_alerts",
}
"""The metric families (a counter's family drops its _total suffix)."""


def make_app(url: str) -> due.App:
    app = due.App(url)
    app.migrate()

    @app.task(name="report", retry=due.Retry(max_attempts=1), queue="reports")
    def report(rows: int) -> int:
        if rows < 0:
            raise ValueError("negative rows")
        return rows

    return app


def live_worker(app: due.App, *queues: str) -> None:
    registration = WorkerRegistration(
        "web-1:42:ab", "web-1", 42, dict.fromkeys(queues, 4), app.tasks.names()
    )
    app.store.worker_register(registration)


def test_check_counts_in_words_with_their_plurals(backend_url: str) -> None:
    """'1 running worker', not '1 running workers'."""
    app = make_app(backend_url)
    try:
        assert run_due(backend_url, "check") == (
            "OK: nothing to alert on (0 queues, 0 schedules, 0 running workers)\n"
        )
        live_worker(app, "reports")
        app.add_schedule("tally", every="1h", task="report", args=[1])
        assert run_due(backend_url, "check") == (
            "OK: nothing to alert on (1 queue, 1 schedule, 1 running worker)\n"
        )
    finally:
        app.close()


def test_check_warns_of_a_schedule_that_the_app_does_not_define(
    backend_url: str, tmp_path: Path
) -> None:
    """A schedule declared in a module the app module does not import does not
    exist for its workers: once stored (by code that did import it), `due check
    --app` says so; without --app it knows no code to judge by."""
    (tmp_path / "myapp.py").write_text(
        "import due\n"
        f"app = due.App({backend_url!r})\n"
        "@app.task(queue='reports')\n"
        "def tally() -> None: ...\n"
    )
    (tmp_path / "schedules.py").write_text(
        "from myapp import app, tally\napp.schedule('nightly', '0 2 * * *', task=tally)\n"
    )
    (tmp_path / "everything.py").write_text("from myapp import app\nimport schedules\n")
    run_due_in(tmp_path, "--app", "myapp:app", "migrate")
    synced = [sys.executable, "-c", "from everything import app; app.sync_schedules()"]
    subprocess.run(synced, cwd=tmp_path, env=PLAIN_ENVIRONMENT, check=True, timeout=60)
    out = run_due_in(tmp_path, "check", "--app", "myapp:app", expect=1)
    assert out.startswith(
        "WARNING schedule nightly: stored as defined in code, but this app does not define "
        "it: is the module that declares it imported by your app module?"
    ), out
    assert run_due_in(tmp_path, "check", "--app", "everything:app").startswith("OK")
    assert run_due(backend_url, "check").startswith("OK")
    with due.App(backend_url) as app:
        kinds = [alert.kind for alert in app.check()]  # this App defines no schedule
        assert kinds == ["schedule_not_in_code"]


def test_check_help_says_what_the_failures_window_covers(tmp_path: Path) -> None:
    """Failed jobs, not failed checks: those alert over the last hour whatever
    the window (the help said it covered both)."""
    shown = " ".join(run_due_in(tmp_path, "check", "--help").split())
    assert "--failures-window TEXT How far back jobs failed for good alert." in shown
    assert "check= alert over the last hour whatever this says" in shown


def test_check_exit_codes_follow_the_monitoring_plugin_convention(backend_url: str) -> None:
    app = make_app(backend_url)
    try:
        assert run_due(backend_url, "check").startswith("OK: nothing to alert on")
        now = datetime.now(UTC)
        # Due for 2 minutes, a live worker serves its queue: a warning (over 1m).
        app.enqueue("report", (1,), run_at=now - timedelta(minutes=2))
        live_worker(app, "reports")
        out = run_due(backend_url, "check", expect=1)
        assert re.fullmatch(
            r"WARNING queue reports: oldest due job waited 2m\d*s? \(warning over 1m\)\n", out
        ), out
        # The thresholds of the command line move the line.
        assert run_due(
            backend_url, "check", "--oldest-due-warning", "5m", "--oldest-due-critical", "10m"
        ).startswith("OK")
        assert "CRITICAL" in run_due(
            backend_url,
            "check",
            "--oldest-due-warning",
            "10s",
            "--oldest-due-critical",
            "1m",
            expect=2,
        )
        document = json.loads(run_due(backend_url, "check", "--json", expect=1))
        assert document["status"] == "warning" and document["exit_code"] == 1
        assert document["alerts"] == [
            {
                "severity": "warning",
                "kind": "oldest_due",
                "subject": "queue reports",
                "message": document["alerts"][0]["message"],
            }
        ]
        # A queue with due jobs and no live worker: critical.
        app.enqueue("report", (2,), queue="nobody")
        out = run_due(backend_url, "check", expect=2)
        assert "CRITICAL queue nobody: 1 due job and no live worker serves it" in out
        assert out.index("CRITICAL") < out.index("WARNING")  # the most severe first
    finally:
        app.close()


def test_check_cannot_tell_when_the_database_is_out_of_reach(sqlite_url: str) -> None:
    out = run_due(sqlite_url, "check", expect=3)
    assert out.startswith("UNKNOWN: ") and "due migrate" in out


def test_metrics_serve_every_documented_family_with_its_values(backend_url: str) -> None:
    app = make_app(backend_url)
    try:
        for rows in (3, 0, -1):
            app.enqueue("report", (rows,))
        drain(app)
        app.enqueue("report", (4,), delay="1h")
        later = due.JobRequest("report", (5,), delay="1h", queue="bulk")
        app.enqueue_many([later] * (COUNT_LIMIT + 1))
        app.pause_queue("reports")
        live_worker(app, "reports")
        app.add_schedule("hourly", every="1h", task="report", args=(1,))
        body = scrape(backend_url)
    finally:
        app.close()
    families = {family.name: family for family in text_string_to_metric_families(body)}
    assert set(families) >= DOCUMENTED
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families.values()
        for sample in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    jobs = {"task": "report", "queue": "reports"}
    assert value("due_jobs_total", **jobs, outcome="succeeded") == 2
    assert value("due_jobs_total", **jobs, outcome="failed") == 1
    assert value("due_jobs_total", **jobs, outcome="rescued") == 0
    assert value("due_job_duration_seconds_count", **jobs) == 3
    assert value("due_job_duration_seconds_bucket", **jobs, le="+Inf") == 3
    assert value("due_queue_jobs", queue="reports", state="queued") == 1
    assert value("due_queue_jobs", queue="reports", state="scheduled") == 1
    assert value("due_queue_jobs", queue="reports", state="failed") == 1
    assert value("due_queue_jobs_at_least", queue="reports", state="scheduled") == 0
    assert value("due_queue_jobs", queue="bulk", state="scheduled") == COUNT_LIMIT
    assert value("due_queue_jobs_at_least", queue="bulk", state="scheduled") == 1
    assert value("due_queue_jobs_at_least", queue="bulk", state="due") == 0
    assert value("due_queue_paused", queue="reports") == 1
    assert value("due_queue_oldest_due_age_seconds", queue="reports") == 0
    assert value("due_workers_alive", queue="reports") == 1
    assert value("due_schedule_missed_total", schedule="hourly") == 0
    next_run = value("due_schedule_next_run_timestamp_seconds", schedule="hourly")
    assert 0 < next_run - time.time() <= 3600  # (every="1h" runs on the hour)
    assert value("due_alerts", severity="warning") == 1  # the failed report, this hour


def scrape(url: str) -> str:
    """Start `due metrics` on a free port, scrape it once, stop it with SIGTERM."""
    with serving_metrics(url) as address, urllib.request.urlopen(address, timeout=30) as response:
        assert response.status == 200
        return str(response.read().decode())


@contextlib.contextmanager
def serving_metrics(url: str, *options: str) -> Iterator[str]:
    """`due metrics --port 0 OPTIONS`, stopped with SIGTERM; its /metrics URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "due", "--url", url, "metrics", "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
        env=PLAIN_ENVIRONMENT,
    )
    try:
        assert process.stderr is not None
        line = wait_until(process.stderr.readline, timeout=30, what="the metrics server")
        address = re.search(r"http://\S+/metrics", line)
        assert address, line
        yield address.group(0)
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


@pytest.mark.parametrize(
    ("options", "answered"),
    [((), []), (("--allow-host", "due-metrics.internal"), ["due-metrics.internal"])],
    ids=["loopback", "a name allowed"],
)
def test_metrics_answer_only_the_names_they_are_served_by(
    sqlite_url: str, options: tuple[str, ...], answered: list[str]
) -> None:
    """A page of another site whose name was re-pointed at 127.0.0.1 (DNS
    rebinding) must not read the metrics as its own."""
    run_due(sqlite_url, "migrate")
    with serving_metrics(sqlite_url, *options) as address:
        port = address.split(":")[2].split("/")[0]
        for name in ["127.0.0.1", "localhost", *answered, "rebound.example"]:
            asked = urllib.request.Request(address, headers={"Host": f"{name}:{port}"})
            try:
                with urllib.request.urlopen(asked, timeout=30) as response:
                    status, body = response.status, response.read().decode()
            except urllib.error.HTTPError as refused:
                status, body = refused.code, refused.read().decode()
            if name == "rebound.example":
                assert status == 403 and "--allow-host" in body, body
            else:
                assert status == 200 and "due_queue_jobs" in body, (name, body)


@pytest.mark.parametrize("rules", ["docs/alerts.yml"])
def test_the_example_alerting_rules_use_only_metrics_we_serve(rules: str) -> None:
    text = (REPOSITORY / rules).read_text()
    used = set(re.findall(r"\b(due_[a-z_]+)", text))
    served = (
        DOCUMENTED
        | {f"{name}_total" for name in ("due_jobs", "due_schedule_missed")}
        | {f"due_job_duration_seconds_{part}" for part in ("bucket", "sum", "count")}
    )
    assert used and used <= served, used - served


def test_the_example_alerting_rules_pass_promtool() -> None:
    need("promtool")
    done = subprocess.run(
        ["promtool", "check", "rules", str(REPOSITORY / "docs" / "alerts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 10 rules found" in done.stdout + done.stderr
