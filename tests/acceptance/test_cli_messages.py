"""What a new user meets at the command line: each refusal says what to fix,
once, and nothing that ran quietly did nothing."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.cli import run_due_in


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
        f"import due\napp = due.App({UNREACHABLE!r})\n\n\n"
        "@app.task\ndef ping() -> None: ...\n"
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
