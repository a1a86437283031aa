"""The `due` command, run as a user runs it: in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import due
from due.cli.workers import _child_command
from due.core.records import WorkerRegistration
from due.testing import drain
from due.worker.settings import WorkerSettings
from tests.helpers.cli import plain_environment, run_due


def test_migrate_then_inspect_and_act(backend_url: str) -> None:
    assert "applied migrations 1, 2, 3" in run_due(backend_url, "migrate")
    assert "up to date" in run_due(backend_url, "migrate")
    app = due.App(backend_url)

    @app.task(name="report", retry=due.Retry(max_attempts=1))
    def report(n: int) -> None:
        raise ValueError(f"no data for {n}")

    try:
        failed = report.enqueue(1)
        drain(app)
        delayed = report.options(delay="1h", queue="later").enqueue(2)
        listing = run_due(backend_url, "jobs")
        assert "report" in listing and "failed" in listing and "queued" in listing
        assert "ValueError: no data for 1" in listing
        assert "later" in run_due(backend_url, "jobs", "--queue", "later")
        assert "failed" not in run_due(backend_url, "jobs", "--state", "queued")
        shown = run_due(backend_url, "show", str(failed.id))
        assert "attempt 1 (error, " in shown and " UTC): ValueError: no data for 1" in shown
        assert "Traceback" in shown
        assert f"job {delayed.id} is cancelled" in run_due(backend_url, "cancel", str(delayed.id))
        assert "queued again" in run_due(backend_url, "retry", str(failed.id))
        assert app.get(failed.id).state == due.JobState.QUEUED
        refused = run_due(backend_url, "cancel", "999999", expect=1)
        assert "error: no job with id 999999" in refused and "Traceback" not in refused
    finally:
        app.close()


def test_an_unmigrated_database_gets_the_fix_not_a_traceback(backend_url: str) -> None:
    out = run_due(backend_url, "jobs", expect=1)
    assert "`due migrate`" in out and "Traceback" not in out


def test_app_option_loads_module_attribute(
    tmp_path: pytest.TempPathFactory, sqlite_url: str
) -> None:
    (tmp_path / "myapp.py").write_text(  # type: ignore[operator]
        f"import due\napp = due.App({sqlite_url!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "due", "--app", "myapp:app", "migrate"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and "applied migrations 1" in done.stdout, done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "due", "--app", "myapp:nothing", "jobs"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert bad.returncode == 1 and "myapp has no attribute 'nothing'" in bad.stderr
    (tmp_path / "notapp.py").write_text("app = 42\n")  # type: ignore[operator]
    wrong = subprocess.run(
        [sys.executable, "-m", "due", "--app", "notapp:app", "jobs"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert wrong.returncode == 1
    assert "notapp.app is of type int, not a due.App" in wrong.stderr


def test_a_worker_refuses_an_unmigrated_database(tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "app_module.py").write_text(
        f"import due\napp = due.App({sqlite_url!r})\n@app.task\ndef t() -> None: ...\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "due", "--app", "app_module:app", "worker"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "does not exist" in done.stderr and "`due migrate`" in done.stderr
    assert "Traceback" not in done.stderr


def test_worker_options_are_checked(tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "app_module.py").write_text(f"import due\napp = due.App({sqlite_url!r})\n")
    for options, message in (
        (["-q", "emails=many"], "must be a whole number"),
        (["-q", "emails", "--lease", "1s"], "lease of 1s is too short"),
        ([], "the app has no tasks"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "due", "--app", "app_module:app", "worker", *options],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert done.returncode == 1 and message in done.stderr, done.stderr


def test_workers_lists_registered_workers(backend_url: str) -> None:
    run_due(backend_url, "migrate")
    app = due.App(backend_url)
    try:
        app.store.worker_register(
            WorkerRegistration("web-1:4242:ab", "web-1", 4242, {"emails": 16, "bulk": 2})
        )
    finally:
        app.close()
    listing = run_due(backend_url, "workers")
    assert "web-1:4242:ab" in listing and "bulk=2, emails=16" in listing and "running" in listing


def test_workers_help_says_when_a_silent_worker_is_gone(sqlite_url: str) -> None:
    """Gone after max(3 x lease, 10 s) of the watching worker, as the help says
    (it said 3 leases, which a 2 s lease makes 6 s)."""
    short, default = (WorkerSettings.build({"emails": 1}, lease=lease) for lease in ("2s", "10s"))
    assert (short.gone_after, default.gone_after) == (10.0, 30.0)
    shown = " ".join(run_due(sqlite_url, "workers", "--help").split())
    assert "One silent for 3 leases of the workers that watch it, and at least 10 s" in shown


def test_schedules_from_the_command_line(tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "sched_app.py").write_text(
        "import due\n"
        f"app = due.App({sqlite_url!r})\n"
        "@app.task(name='report')\n"
        "def report(kind: str = 'daily') -> None: ...\n"
        "app.schedule('nightly', '0 2 * * *', task='report', tz='Europe/Paris')\n"
    )

    def due_cli(*args: str, expect: int = 0) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "due", "--app", "sched_app:app", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == expect, done.stdout + done.stderr
        return done.stdout + done.stderr

    due_cli("migrate")
    due_cli(
        "schedule",
        "add",
        "adhoc",
        "--task",
        "report",
        "--every",
        "15m",
        "--kwargs",
        '{"kind": "adhoc"}',
    )
    listing = due_cli("schedules")
    assert "adhoc" in listing and "every 900s" in listing and "enabled" in listing
    assert "started job" in due_cli("schedule", "trigger", "adhoc")
    assert "paused" in due_cli("schedule", "pause", "adhoc")
    assert "paused" in due_cli("schedule", "list")
    runs = due_cli("schedule", "runs", "adhoc")
    assert "enqueued" in runs and "triggered by hand" in runs
    assert "resumed" in due_cli("schedule", "resume", "adhoc")
    assert "removed" in due_cli("schedule", "remove", "adhoc")
    bad = due_cli("schedule", "add", "x", "--task", "report", "--cron", "0 25 * * *", expect=1)
    assert "the hour field '25' is invalid" in bad and "Traceback" not in bad
    never = due_cli("schedule", "add", "x", "--task", "report", "--cron", "0 0 30 2 *", expect=1)
    assert "'0 0 30 2 *' never fires" in never and "Traceback" not in never
    ages = due_cli("schedule", "add", "x", "--task", "report", "--every", "700000000", expect=1)
    assert "more than 10 years" in ages and "Traceback" not in ages
    assert "nothing to prune" in due_cli("schedule", "prune")
    missing = due_cli("schedule", "pause", "nope", expect=1)
    assert "no schedule named 'nope'" in missing


def cells(line: str) -> list[str]:
    """The cells of one row of a rich table."""
    return [cell.strip() for cell in line.split("│")[1:-1]]


def test_status_pause_resume_and_pieces(backend_url: str) -> None:
    run_due(backend_url, "migrate")
    app = due.App(backend_url)

    @app.task(name="chunk", queue="bulk")
    def chunk(n: int) -> None: ...

    try:
        parent = app.batch(chunk, [(n,) for n in range(4)])
        status = run_due(backend_url, "status").splitlines()
        (bulk,) = [cells(line) for line in status if "bulk" in line]
        assert bulk[:6] == ["bulk", "4", "4", "0", "1", "0"]  # queued, due, running, waiting
        (waiting,) = [cells(line) for line in status if "due.batch" in line]
        assert waiting[:3] == [str(parent.id), "due.batch", "waiting"] and waiting[4] == "0/4"
        assert "queue bulk is paused" in run_due(backend_url, "pause", "bulk")
        paused = next(row for row in run_due(backend_url, "status").splitlines() if "│ bulk" in row)
        assert cells(paused)[-1] == "yes"  # under the header "paused"
        assert drain(app).attempts == 0
        assert "queue bulk is resumed" in run_due(backend_url, "resume", "bulk")
        assert f"pieces of job {parent.id} are paused" in run_due(
            backend_url, "pause", "--group", str(parent.id)
        )
        assert drain(app).attempts == 0
        run_due(backend_url, "resume", "--group", str(parent.id))
        assert len(drain(app).succeeded) == 4
        pieces = run_due(backend_url, "jobs", "--parent", str(parent.id))
        assert pieces.count("succeeded") == 4
        shown = run_due(backend_url, "show", str(parent.id))
        assert "4 of 4 ended (4 ok, 0 failed)" in shown and "4/4 (100%)" in shown
        assert "name a QUEUE" in run_due(backend_url, "pause", expect=2)
    finally:
        app.close()


def test_a_module_planted_in_the_working_directory_shadows_nothing_installed(
    tmp_path: Path, postgres_url: str
) -> None:
    """`due --app` finds the app in the working directory, after what is
    installed: a psycopg.py left there (a shared folder, a download) is not
    the driver the store imports."""
    (tmp_path / "psycopg.py").write_text(
        "import pathlib\npathlib.Path('planted-ran').touch()\nraise SystemExit('planted')\n"
    )
    (tmp_path / "shop.py").write_text(f"import due\napp = due.App({postgres_url!r})\n")
    command = Path(sys.executable).parent / "due"  # as installed, not python -m (see below)
    done = subprocess.run(
        [str(command), "--app", "shop:app", "migrate"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=plain_environment(),
    )
    assert done.returncode == 0 and "applied migrations" in done.stdout, done.stderr
    assert not (tmp_path / "planted-ran").exists()
    # `python -m` puts the working directory first itself; a worker's
    # processes (--processes N) are started without it (-P).
    assert _child_command()[:4] == [sys.executable, "-P", "-m", "due"]
