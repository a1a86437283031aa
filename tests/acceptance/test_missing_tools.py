"""`make test` without root, on a machine without the tools some tests drive
(faketime, promtool, Chromium, PgBouncer): each scripts/ensure-* says in one
line that it could not install its tool and exits 0, and the tests that need
the tool skip, each with one line that names it; nothing else fails.

The tools are made missing by DUE_TEST_HIDE_TOOLS (tests/helpers/tools.py),
which the scripts and the tests both read; the scripts run as `nobody`, whose
apt-get is refused as it is for any user who is not root.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.tools import HIDE_VARIABLE, TOOLS, missing_line
from tests.helpers.workers import REPOSITORY

pytestmark = pytest.mark.slow
EVERY_TOOL = " ".join(TOOLS)
NEEDS = {
    "faketime": "tests/chaos/test_deployment.py::"
    "test_kill_all_reaches_a_worker_whose_faketime_process_died",
    "promtool": "tests/acceptance/test_monitoring.py::"
    "test_the_example_alerting_rules_pass_promtool",
    "chromium": "tests/web/test_dashboard_browser.py::test_retry_a_failed_job_from_its_page",
    "pgbouncer": "tests/integration/test_pooler.py::"
    "test_told_nothing_the_breakage_is_named_with_its_fix",
}
"""One test that needs each tool."""


def as_a_user(command: list[str]) -> list[str]:
    """The command as `nobody` when this runs as root (as CI does), else as is."""
    if os.geteuid() != 0:
        return command
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]


@pytest.mark.parametrize("tool", list(TOOLS))
def test_without_root_an_ensure_script_says_so_in_one_line_and_goes_on(tool: str) -> None:
    done = subprocess.run(
        as_a_user([str(REPOSITORY / "scripts" / f"ensure-{tool}")]),
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", HIDE_VARIABLE: EVERY_TOOL},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert f"{tool} is missing and could not be installed" in line
    assert f"the tests that need {tool} will be SKIPPED" in line


def test_the_tests_that_need_a_missing_tool_skip_each_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *NEEDS.values()],
        env={
            **{name: value for name, value in os.environ.items() if not name.startswith("PYTEST")},
            HIDE_VARIABLE: EVERY_TOOL,
        },
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
    )
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED [")]
    assert done.returncode == 0, done.stdout + done.stderr
    closing = done.stdout.splitlines()[-1]
    assert "skipped" in closing and "passed" not in closing, done.stdout
    for tool in NEEDS:
        assert [line for line in skipped if line.endswith(missing_line(tool))], done.stdout
