"""The `due` command, run as a user runs it: in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.workers import REPOSITORY

# The caller's PYTHONPATH, if any, is kept: a worktree's tests export it to run
# their own src/ rather than the installed `due` (unset, as in CI, the message
# for an app not found says "PYTHONPATH=not set", which a test reads).
PLAIN_ENVIRONMENT = {
    "COLUMNS": "200",
    "PATH": "/usr/bin:/bin",
    **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),
}


def run_due(url: str, *args: str, expect: int = 0) -> str:
    """`due --url URL ARGS...`; fails the test unless it exits with `expect`."""
    return run_due_in(None, "--url", url, *args, expect=expect)


def run_due_in(
    folder: Path | None, *args: str, expect: int = 0, env: dict[str, str] | None = None
) -> str:
    """`due ARGS...` in `folder` (the repository by default), with a plain
    environment; fails the test unless it exits with `expect`. Returns what it
    printed, stdout then stderr."""
    done = run_command(folder, *args, env=env)
    assert done.returncode == expect, done.stdout + done.stderr
    return done.stdout + done.stderr


def run_command(
    folder: Path | None, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "due", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=folder or REPOSITORY,
        env=plain_environment(env),
    )


def plain_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """PLAIN_ENVIRONMENT with `extra`; a PYTHONPATH in `extra` comes first."""
    env = {**PLAIN_ENVIRONMENT, **(extra or {})}
    if extra and "PYTHONPATH" in extra and "PYTHONPATH" in PLAIN_ENVIRONMENT:
        env["PYTHONPATH"] = os.pathsep.join([extra["PYTHONPATH"], PLAIN_ENVIRONMENT["PYTHONPATH"]])
    return env
