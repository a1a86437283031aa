"""`make test` and CI run every stage, even after one fails, and end by naming
each stage that failed: one flaky test in the first stage hides nothing after it."""

from __future__ import annotations

import subprocess

from tests.helpers.workers import REPOSITORY

RUN_STAGES = REPOSITORY / "scripts" / "run-stages"


def stages(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUN_STAGES), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_every_stage_runs_and_the_end_names_those_that_failed() -> None:
    done = stages("first", "echo first ran; exit 3", "second", "echo second ran", "third", "exit 1")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert "first ran" in lines and "second ran" in lines
    assert lines[-3:] == ["stages: 2 of 3 FAILED:", "  - first (exit 3)", "  - third (exit 1)"]


def test_when_every_stage_passes_it_exits_0() -> None:
    done = stages("only", "true", "also", "true")
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == "stages: all 2 succeeded"


def test_make_test_and_ci_run_their_stages_through_it() -> None:
    planned = subprocess.run(
        ["make", "-n", "test"], cwd=REPOSITORY, capture_output=True, text=True, check=True
    ).stdout
    stage_commands = planned[planned.index("scripts/run-stages") :]
    for command in (
        '-m "not serial and not bench and not fresh_install"',
        "-m fresh_install",
        "-m serial",
        "scripts/test-django",
    ):
        assert command in stage_commands
    ci = (REPOSITORY / ".ci" / "run").read_text()
    assert "exec scripts/run-stages" in ci and "set -e" not in ci
    for target in ("check", "test", "test-newest-python", "test-django-previous", "docs"):
        assert f'"make {target}" "make {target}"' in ci
