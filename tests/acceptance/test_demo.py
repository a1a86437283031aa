"""`make demo` runs: the example app with a real worker, to its end."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.workers import REPOSITORY

pytestmark = pytest.mark.slow


def test_the_demo_runs_to_its_end(tmp_path: Path) -> None:
    for example in (REPOSITORY / "examples").glob("*.py"):
        shutil.copy(example, tmp_path)
    done = subprocess.run(
        [sys.executable, "demo.py", "--once"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "second reminder for user 1 deduplicated: True" in out
    assert "app.wait: job 3 succeeded, returned {'month': '2026-11', 'rows': 1234}" in out
    assert "6 of 6 ranges backfilled, 0 failed" in out
    assert "exported on attempt 2" in out and "tally: */2 * * * * *" in out
    assert "worker stopped with exit code 0" in out
    assert "dashboard: http://127.0.0.1:" in out
    assert "dashboard stopped with exit code 0" in out
