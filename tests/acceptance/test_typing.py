"""A type checker sees each task's signature: right calls pass, wrong ones fail."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.workers import REPOSITORY

WRONG_CALLS = {
    "wrong_type": ('send_reset_email.enqueue("not-an-int")', 'has incompatible type "str"'),
    "missing": ("send_reset_email.enqueue()", 'Missing positional argument "user_id"'),
    "too_many": ('send_reset_email.enqueue("not-an-int", 2, 3)', "Too many arguments"),
    "keyword_type": ("build_report.enqueue(month=1)", 'Argument "month"'),
    "context_given": ("resize.enqueue(None, 7)", 'incompatible type "None"'),
    "options_type": ('send_reset_email.options(delay="1h").enqueue("x")', "TaskWithOptions"),
    "old_option_form": (
        'send_reset_email.enqueue(42, delay="24h")',
        'Unexpected keyword argument "delay"',
    ),
    "async_type": ('build_report.aenqueue(month=b"x")', 'Argument "month"'),
    "request_type": ('resize.request("7")', 'has incompatible type "str"'),
}


def mypy(paths: list[Path], cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPOSITORY,
    )


@pytest.mark.slow
def test_right_calls_pass_and_wrong_calls_fail(tmp_path: Path) -> None:
    """One mypy run: the user module in tests/typing passes; each wrong call,
    in a module of its own, fails with the error that names it."""
    modules = []
    for name, (call, _) in WRONG_CALLS.items():
        module = tmp_path / f"wrong_{name}.py"
        module.write_text(
            textwrap.dedent(
                f"""\
                from tests.typing.usage import build_report, resize, send_reset_email


                async def call() -> None:
                    {"await " if "aenqueue" in call else ""}{call}
                """
            )
        )
        modules.append(module)
    done = mypy([REPOSITORY / "tests" / "typing" / "usage.py", *modules], tmp_path / "cache")
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not [line for line in errors if "usage.py" in line], done.stdout
    for name, (call, expected) in WRONG_CALLS.items():
        found = [line for line in errors if f"wrong_{name}.py" in line]
        assert found, f"mypy accepted {call}:\n{done.stdout}"
        assert any(expected in line for line in found), (call, found)
