"""What a new user meets at the command line: each refusal says what to fix,
once, and nothing that ran quietly did nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import due
from tests.helpers.cli import run_command, run_due_in


def test_a_sqlite_url_with_two_slashes_is_told_its_slashes_not_its_scheme(
    tmp_path: Path,
) -> None:
    out = run_due_in(tmp_path, "jobs", "--url", "sqlite://due.db", expect=1)
    assert "unsupported" not in out and "the scheme is right, the slashes are not" in out, out
    assert "sqlite:///due.db is due.db in the working directory" in out, out
    assert "sqlite:////abs/path/due.db" in out and "Traceback" not in out, out
    assert not (tmp_path / "due.db").exists()


UNREACHABLE = "postgresql://127.0.0.1:1/app"


def test_an_unreachable_database_is_said_once_by_due_not_also_by_psycopg(
    tmp_path: Path,
) -> None:
    """psycopg's pool logged its failed connection ("error connecting in
    'due': ...") before due's own error said the same, for the command and the
    worker alike."""
    (tmp_path / "faraway.py").write_text(
        f"import due\napp = due.App({UNREACHABLE!r})\n\n\n@app.task\ndef ping() -> None: ...\n"
    )
    outputs = [
        run_due_in(tmp_path, "status", "--url", UNREACHABLE, expect=1),
        run_due_in(tmp_path, "jobs", "--url", UNREACHABLE, "--json", expect=1),
        run_due_in(tmp_path, "worker", "--app", "faraway:app", expect=1),
    ]
    for out in outputs:
        assert "psycopg" not in out and "error connecting" not in out, out
        assert out.count("app on 127.0.0.1:1 is unreachable") == 1, out
        assert "Is the server running on that host" in out and "Traceback" not in out, out


@pytest.fixture
def welcome_app(backend_url: str, tmp_path: Path) -> Iterator[due.App]:
    """myapp.py, as a new user writes it, with one job of `myapp.send_welcome`."""
    (tmp_path / "myapp.py").write_text(
        f"import due\napp = due.App({backend_url!r})\n\n\n"
        "@app.task\ndef send_welcome(user_id: int) -> None: ...\n"
    )
    application = due.App(backend_url)
    application.migrate()

    @application.task(name="myapp.send_welcome")
    def send_welcome(user_id: int) -> None: ...

    send_welcome.enqueue(1)
    yield application
    application.close()


@pytest.mark.parametrize(
    ("typed", "command"),
    [
        ("myapp.send_welcom", ["jobs"]),  # misspelt
        ("send_welcome", ["jobs"]),  # without its module
        ("send_welcome", ["jobs", "--json"]),
        ("myapp.send_welcom", ["retry", "--yes"]),  # a bulk action that did nothing
        ("send_welcome", ["cancel", "--yes"]),
        ("myapp.send_welcom", ["cancel", "--dry-run"]),
    ],
)
@pytest.mark.parametrize("given", ["--app", "--url"])
def test_a_task_no_one_knows_is_refused_with_the_closest_not_an_empty_answer(
    welcome_app: due.App,
    backend_url: str,
    tmp_path: Path,
    typed: str,
    command: list[str],
    given: str,
) -> None:
    """Known: the app's tasks (with --app), and those the database names."""
    where = ["--app", "myapp:app"] if given == "--app" else ["--url", backend_url]
    done = run_command(tmp_path, *command, "--task", typed, *where)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == "", done.stdout  # nothing a script could take for an answer
    said = done.stderr
    assert f"error: --task: no task named {typed!r} is known" in said, said
    assert "did you mean 'myapp.send_welcome'?" in said, said
    assert welcome_app.jobs()[0].state == due.JobState.QUEUED and welcome_app.history() == []


def test_a_known_task_with_nothing_to_show_is_still_an_empty_answer(
    welcome_app: due.App, backend_url: str, tmp_path: Path
) -> None:
    """Known by the database only (no --app), or by the app only (no job yet)."""
    run_due_in(tmp_path, "retry", "--task", "myapp.send_welcome", "--url", backend_url)
    listed = run_due_in(
        tmp_path,
        "jobs",
        "--task",
        "myapp.send_welcome",
        "--state",
        "failed",
        "--json",
        "--url",
        backend_url,
    )
    assert json.loads(listed) == {"jobs": []}
    (tmp_path / "myapp.py").write_text(
        (tmp_path / "myapp.py").read_text() + "\n\n@app.task\ndef send_goodbye() -> None: ...\n"
    )
    said = run_due_in(
        tmp_path, "cancel", "--task", "myapp.send_goodbye", "--yes", "--app", "myapp:app"
    )
    assert "no job to cancel matches" in said
    none = run_command(tmp_path, "jobs", "--task", "myapp.send_goodbye", "--url", backend_url)
    assert none.returncode == 1 and "did you mean 'myapp.send_welcome'?" in none.stderr
