"""The `due` command, run as a user runs it: in a subprocess."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.workers import REPOSITORY


def run_due(url: str, *args: str, expect: int = 0) -> str:
    """`due --url URL ARGS...`; fails the test unless it exits with `expect`."""
    done = subprocess.run(
        [sys.executable, "-m", "due", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPOSITORY,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == expect, done.stdout + done.stderr
    return done.stdout + done.stderr
