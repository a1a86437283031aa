"""Every form of the command the README and --help show: options before or after
the command, help on everything, and clear refusals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import click
import pytest

import due
from due.cli import main
from tests.helpers.cli import run_due, run_due_in
from tests.helpers.waiting import wait_until


def all_commands(
    group: click.Group = main, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = []
    for name, command in sorted(group.commands.items()):
        found.append(((*prefix, name), command))
        if isinstance(command, click.Group):
            found.extend(all_commands(command, (*prefix, name)))
    return found


def test_every_command_and_option_has_a_help_line() -> None:
    assert main.help
    missing = []
    for path, command in all_commands():
        if not (command.help or command.short_help):
            missing.append(" ".join(path))
        for parameter in command.params:
            if isinstance(parameter, click.Option) and not parameter.help:
                missing.append(f"{' '.join(path)} {parameter.opts[0]}")
    assert not missing, f"without a help line: {missing}"


def test_every_command_takes_app_and_url_after_it() -> None:
    for path, command in all_commands():
        names = {opt for p in command.params for opt in getattr(p, "opts", [])}
        assert {"--app", "--url"} <= names, " ".join(path)


def test_the_lone_scheduler_shows_only_its_own_options(backend_url: str) -> None:
    shown = run_due(backend_url, "scheduler", "--help")
    assert "--leader-ttl" in shown and "--retention" in shown and "--app" in shown
    for job_option in ("--lease", "--grace", "--concurrency", "--processes", "-q"):
        assert f"{job_option} " not in shown, job_option


def test_log_level_takes_only_real_levels(backend_url: str) -> None:
    refused = run_due(backend_url, "worker", "--log-level", "loud", expect=2)
    assert "'loud' is not one of 'debug', 'info', 'warning', 'error', 'critical'" in refused


def test_url_before_or_after_the_command_is_the_same(backend_url: str) -> None:
    run_due(backend_url, "migrate")
    with due.App(backend_url) as app:

        @app.task(name="send", queue="emails", retry=due.Retry(max_attempts=1))
        def send(n: int) -> None: ...

        job = send.options(delay="1h").enqueue(1)
    for command in (
        ["status"],
        ["jobs"],
        ["workers"],
        ["schedules"],
        ["schedule", "list"],
        ["show", str(job.id)],
    ):
        assert run_due_in(None, *command, "--url", backend_url) == run_due(backend_url, *command)
    for command, said in (
        (["migrate"], "schema is up to date"),
        (["cancel", str(job.id)], "is cancelled"),
        (["retry", str(job.id)], "is queued again"),
        (["pause", "emails"], "is paused"),
        (["resume", "emails"], "is resumed"),
        (["schedule", "runs", "none"], "no schedule named 'none'"),
    ):
        expect = 1 if command[0] == "schedule" else 0
        assert said in run_due_in(None, *command, "--url", backend_url, expect=expect)


def test_a_url_after_the_command_wins_over_the_environment(sqlite_url: str, tmp_path: Path) -> None:
    run_due(sqlite_url, "migrate")
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    shown = run_due_in(None, "status", "--url", sqlite_url, env={"DUE_DATABASE_URL": elsewhere})
    assert "does not exist" not in shown
    twice = run_due_in(None, "--url", sqlite_url, "status", "--url", elsewhere, expect=2)
    assert "--url is given twice" in twice


def write_app(folder: Path, url: str) -> None:
    (folder / "myapp.py").write_text(
        "import due\n"
        f"app = due.App({url!r})\n"
        "@app.task(queue='emails')\n"
        "def send_reset_email(user_id: int) -> None: ...\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["after", "before", "environment"])
def test_a_worker_starts_with_the_app_given_anywhere(
    backend_url: str, tmp_path: Path, placement: str
) -> None:
    write_app(tmp_path, backend_url)
    run_due_in(tmp_path, "--app", "myapp:app", "migrate")
    args = {
        "after": ["worker", "--app", "myapp:app", "-q", "emails=16"],
        "before": ["--app", "myapp:app", "worker", "-q", "emails=16"],
        "environment": ["worker", "-q", "emails=16"],
    }[placement]
    env = {**os.environ, "DUE_APP": "myapp:app", "PYTHONPATH": str(tmp_path)}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "due", *args],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env if placement == "environment" else {**env, "DUE_APP": ""},
        )
    try:
        wait_until(
            lambda: "worker.started" in log.read_text() or worker.poll() is not None,
            what="the worker to start",
        )
        assert worker.poll() is None, log.read_text()
        assert "queues=emails=16" in log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()


def test_a_missing_attribute_is_named(sqlite_url: str, tmp_path: Path) -> None:
    write_app(tmp_path, sqlite_url)
    refused = run_due_in(tmp_path, "--app", "myapp:ap", "status", expect=1)
    assert "myapp has no attribute 'ap'" in refused and "Traceback" not in refused


@pytest.mark.parametrize(
    "command", [["status"], ["jobs"], ["show", "1"], ["workers"], ["schedules"], ["cancel", "1"]]
)
def test_looking_at_a_database_that_does_not_exist_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "typo.db"
    refused = run_due(f"sqlite:///{path}", *command, expect=1)
    assert f"SQLite database {path} does not exist" in refused
    assert "`due migrate`" in refused and "Traceback" not in refused
    assert list(tmp_path.iterdir()) == []


def test_pausing_a_queue_nothing_uses_is_refused_unless_forced(
    backend_url: str, tmp_path: Path
) -> None:
    write_app(tmp_path, backend_url)
    run_due_in(tmp_path, "--app", "myapp:app", "migrate")
    typo = run_due_in(tmp_path, "pause", "emials", "--app", "myapp:app", expect=1)
    assert "no task, job, worker or schedule uses queue 'emials'" in typo
    assert "did you mean 'emails'?" in typo and "--force" in typo
    assert "resume it anyway" in run_due(backend_url, "resume", "emials", expect=1)
    assert "queue emails is paused" in run_due_in(tmp_path, "pause", "emails", "--app", "myapp:app")
    assert "queue later is paused" in run_due(backend_url, "pause", "later", "--force")
    assert "queue later is resumed" in run_due(backend_url, "resume", "later")
    with due.App(backend_url) as app:
        assert {q.name: q.paused for q in app.queues()} == {"emails": True, "later": False}


def test_an_app_not_on_the_path_says_where_python_looked_and_how_to_point_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    """It said only `No module named 'myapp'`."""
    write_app(tmp_path, sqlite_url)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = run_due_in(elsewhere, "--app", "myapp:app", "jobs", expect=1)
    assert "no module named 'myapp' in the current directory" in refused
    assert f"({elsewhere})" in refused and "PYTHONPATH=not set; sys.path starts" in refused
    assert "run due from the directory that holds myapp.py, or set PYTHONPATH" in refused
    assert "Traceback" not in refused
    found = run_due_in(
        elsewhere, "--app", "myapp:app", "migrate", env={"PYTHONPATH": str(tmp_path)}
    )
    assert "applied migrations" in found
    (tmp_path / "brokenapp.py").write_text("import no_such_dependency\n")
    broken = run_due_in(tmp_path, "--app", "brokenapp:app", "jobs", expect=1)
    assert "'brokenapp' was found, but importing it failed: " in broken
    assert "No module named 'no_such_dependency'" in broken


@pytest.mark.parametrize(
    "command",
    [
        ["show", str(2**70)],
        ["cancel", str(2**70)],
        ["retry", str(2**63)],
        ["jobs", "--limit", "-1"],
        ["workers", "--limit", "-1"],
        ["schedule", "runs", "nightly", "--limit", "-1"],
    ],
)
def test_ids_and_limits_out_of_range_get_one_clear_line_on_both(
    backend_url: str, command: list[str]
) -> None:
    """An id past 64 bits was an OverflowError on SQLite; a negative limit listed
    every job there and was a refused statement on PostgreSQL."""
    run_due(backend_url, "migrate")
    refused = run_due(backend_url, *command, expect=1)
    assert refused.startswith("error: ") and "Traceback" not in refused
    assert "no job with id" in refused or "limit=-1 is negative" in refused
