"""What a page's steps are held to: output as shown, exceptions only where
shown, and files that a later step uses."""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.docs.normalise import matches, normalise
from tests.docs.processes import PageFailure

TRACEBACK = "Traceback (most recent call last):"
RAN_LOG = ".docs-files-run"
"""Where site/sitecustomize.py notes the page's Python files each process opens."""


def compare(where: str, expected: Sequence[str], actual: Sequence[str]) -> None:
    """Fail unless `actual` is what the page shows (normalise.py says what may differ)."""
    printed_log = os.environ.get("DUE_DOCS_PRINTED")
    if printed_log:  # a writer refreshing a page's outputs: what each step printed
        with open(printed_log, "a") as log:
            log.write(f"--- {where}\n" + "".join(f"{line}\n" for line in actual))
    if matches(expected, actual):
        return
    diff = difflib.unified_diff(
        normalise(expected), normalise(actual), "shown", "printed", lineterm=""
    )
    raise PageFailure(
        f"{where}\noutput differs (after normalising, see tests/docs/normalise.py):\n"
        + "\n".join(diff)
        + "\nprinted:\n"
        + "\n".join(actual)
    )


def check_python_reply(
    where: str, reply: dict[str, Any], expected: list[str] | None, session_log: str
) -> None:
    """A Python block raised only if the page shows its traceback, and printed
    what the page shows (with the exception's last line, when it raised)."""
    printed = reply["stdout"].splitlines()
    raises = expected is not None and TRACEBACK in expected
    if reply["exception"] is not None and not raises:
        raise PageFailure(
            f"{where}: raised\n{reply['traceback']}\nprinted:\n{reply['stdout']}"
            f"\nsession log:\n{session_log}"
        )
    if expected is None:
        return
    if raises:
        if reply["exception"] is None:
            raise PageFailure(f"{where}: shows a traceback, but raised nothing")
        expected = [*expected[: expected.index(TRACEBACK)], expected[-1]]
        printed = [*printed, reply["exception"]]
    compare(where, expected, printed)


def files_run(folder: Path) -> list[str]:
    """The page's Python files opened so far by any process, in order."""
    ran_log = folder / RAN_LOG
    return ran_log.read_text().splitlines() if ran_log.exists() else []


def unused_files(folder: Path, files: dict[Path, tuple[int, int]]) -> list[tuple[str, int]]:
    """Files the page wrote (path: the block's line, and how many files had been
    opened then) that no process opened after that write."""
    ran = files_run(folder)
    return [
        (path.name, line) for path, (line, before) in files.items() if str(path) not in ran[before:]
    ]
