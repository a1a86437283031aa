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
