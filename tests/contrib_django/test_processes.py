"""The project's own processes: `manage.py due_worker` (and its --processes
children) running jobs a view enqueued, `manage.py migrate` making due's
tables, `due_status`, `due_check` and the `due` command with --django."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import django
import pytest
from django.tasks import TaskResultStatus
from django.test import Client
from django.utils import timezone
from shop.tasks import always_fails, send_welcome_email

import due
from tests.contrib_django.conftest import PROJECT, manage, project_env
from tests.helpers.waiting import wait_until


@contextlib.contextmanager
def worker(database: str, *arguments: str) -> Iterator[subprocess.Popen[str]]:
    """`manage.py due_worker` serving the database's backend, stopped with SIGTERM."""
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "due_worker", "--grace", "5s", *arguments],
            cwd=PROJECT,
            env=project_env(DUE_TEST_BACKEND=database),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
            log.seek(0)
            output = log.read()
        assert code == 0, f"the worker exited {code}:\n{output}"


def finished(task: object, result_id: str) -> object:
    found = task.get_result(result_id)  # type: ignore[attr-defined]
    return found if found.is_finished else None


@pytest.mark.parametrize(
    ("database", "processes"), [("default", "2"), ("pg", "1")], ids=["sqlite", "postgres"]
)
def test_manage_py_due_worker_runs_what_a_view_committed(
    database: str, processes: str, app: due.App
) -> None:
    email = f"worker-{database}@example.com"
    response = Client().post(f"/signup/{database}/", {"email": email})
    assert response.status_code == 200
    result_id = response.json()["id"]
    failing = always_fails.using(backend=database).enqueue("for good")
    task = send_welcome_email.using(backend=database)
    with worker(database, "--processes", processes):
        done = wait_until(lambda: finished(task, result_id), timeout=60, what="the signup email")
        failed = wait_until(
            lambda: finished(always_fails.using(backend=database), failing.id),
            timeout=60,
            what="the failing task",
        )
        # The worker's scheduler synced the DUE setting's schedule.
        wait_until(
            lambda: "tidy-up" in {s.stored.name for s in app.schedules()},
            timeout=30,
            what="the schedule synced",
        )
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {"sent_to": email, "signed_up": True}  # it read the committed row
    assert len(done.worker_ids) == 1 and done.worker_ids[0] != "due.testing.drain"
    assert failed.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in failed.errors] == ["builtins.ValueError"] * 2
    assert len(failed.worker_ids) == 2


def test_manage_py_due_worker_takes_due_worker_s_options() -> None:
    shown = manage("due_worker", "--settings", "mysite.settings", "--help")
    assert shown.returncode == 0, shown.stderr
    for option in ("--queue", "--concurrency", "--grace", "--processes", "--scheduler"):
        assert option in shown.stdout
    assert "manage.py due_worker" in shown.stdout


def test_manage_py_due_status_and_due_check(database: str, app: due.App) -> None:
    status = manage("due_status", DUE_TEST_BACKEND=database)
    assert status.returncode == 0, status.stderr
    assert "emails" in status.stdout
    for left in app.jobs(state="queued", limit=10_000):  # earlier tests' (no worker runs now)
        app.cancel(left.id)
    healthy = manage("due_check", "--json", DUE_TEST_BACKEND=database)
    assert healthy.returncode in (0, 1), healthy.stdout + healthy.stderr  # 1: earlier failures
    past = timezone.now() - timedelta(hours=1)
    late = send_welcome_email.using(backend=database, run_after=past).enqueue("late@example.com")
    try:
        critical = manage("due_check", "--oldest-due-critical", "10m", DUE_TEST_BACKEND=database)
        assert critical.returncode == 2, critical.stdout + critical.stderr
        assert "emails" in critical.stdout
    finally:
        app.cancel(int(late.id))


@pytest.mark.parametrize("how", ["--django", "DJANGO_SETTINGS_MODULE"])
def test_the_due_command_finds_the_django_project(how: str, database: str, app: due.App) -> None:
    result = send_welcome_email.using(backend=database).enqueue(f"cli-{how}@example.com")
    due_command = [str(Path(sys.executable).with_name("due"))]
    env = project_env(DUE_TEST_BACKEND=database)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    if how == "--django":
        command = [*due_command, "--django", "mysite.settings", "show", result.id, "--json"]
    else:
        env["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
        command = [*due_command, "show", result.id, "--json"]
    shown = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert f"cli-{how}@example.com" in shown.stdout
    app.cancel(int(result.id))


def test_manage_py_migrate_makes_and_upgrades_due_s_tables(tmp_path: Path) -> None:
    """On a new database `migrate` makes due's tables; when they are behind (here:
    gone), the next `migrate` brings them up to date though Django has no
    migration of its own left to apply."""
    env = {"DUE_TEST_SQLITE": str(tmp_path / "fresh.sqlite3")}
    first = manage("migrate", **env)
    assert first.returncode == 0, first.stderr
    assert "Applying due.0001_due_schema... OK" in first.stdout
    db = sqlite3.connect(tmp_path / "fresh.sqlite3")
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert "due_jobs" in tables and "shop_signup" in tables
    for table in [t for t in tables if t.startswith("due_")]:
        db.execute(f"DROP TABLE {table}")
    db.commit()
    again = manage("migrate", **env)
    assert again.returncode == 0, again.stderr
    assert "No migrations to apply" in again.stdout
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert "due_jobs" in tables
    db.close()
    listed = manage("showmigrations", "due", **env)
    assert "[X] 0001_due_schema" in listed.stdout


def test_django_s_test_runner_sends_the_jobs_to_its_test_databases() -> None:
    """`manage.py test`: due's tables are made in the test databases, and the
    backends follow them there (jobs never reach the development databases)."""
    ran = manage("test", "shop", "--noinput", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Ran 8 tests" in ran.stderr


def test_django_s_test_runner_in_parallel_clones_due_s_tables_too() -> None:
    """`manage.py test --parallel`: Django copies the test databases, one per
    process. PostgreSQL refused while due's connections were open ("being
    accessed by other users"), and the SQLite copy lacked due's tables (in the
    WAL file, not copied): due's runner closes them and checkpoints first."""
    ran = manage("test", "shop", "--noinput", "--parallel", "2", timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Cloning test database for alias 'pg'" in ran.stderr
    assert "Ran 8 tests" in ran.stderr


def test_due_s_test_runner_empties_due_s_tables_after_every_transaction_test_case() -> None:
    """Also where Django's flush sends no post_migrate: a database that holds
    due's tables and no model's (Django has nothing to flush there),
    `available_apps` and `serialized_rollback`."""
    leftovers = [f"shop.tests.{name}" for name in ("LeftoverTests", *ON_POSTGRES)]
    ran = manage("test", *leftovers, "--noinput", timeout=120, DUE_TEST_PG_DUE_ONLY="1")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Ran 6 tests" in ran.stderr
    ran = manage("test", "shop.rollback_tests", "--noinput", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Ran 2 tests" in ran.stderr


@pytest.mark.skipif(
    django.VERSION < (6, 1),
    reason="Django 6.0's forkserver and spawn workers look for a SQLite test database's "
    "clone in the working directory, not where Django made it (fixed in 6.1): no project "
    "with a SQLite test database in a file runs --parallel there, due or not",
)
def test_due_s_test_runner_empties_due_s_tables_in_forkserver_processes() -> None:
    """In the processes of `--parallel` started as Python 3.14 on Linux or macOS
    starts them, Django sets up a test environment of its own, not the
    runner's: the cleanup travels with each test. forkserver only: spawn
    (macOS) sets the processes up the same way, slower."""
    ran = manage(
        "test", *[f"shop.tests.{name}" for name in ON_POSTGRES], "--noinput",
        "--parallel", "2", timeout=180, DUE_TEST_START_METHOD="forkserver",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Ran 4 tests" in ran.stderr, ran.stderr


ON_POSTGRES = ("LeftoverOnPostgresTests", "LeftoverWithAvailableAppsTests")
"""Test classes whose jobs are PostgreSQL's only: in a process started by
forkserver or spawn, Django's SQLite test database is in memory."""


def test_call_command_runs_a_due_command_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`call_command("due_status")` (Django's way in code, not manage.py's argv)."""
    from django.core.management import call_command

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # run_due sets it for its children
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    call_command("due_status", "--json")
    assert '"queues"' in capsys.readouterr().out
