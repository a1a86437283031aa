"""What a page's steps are held to: output as shown, exceptions only where
shown, and files that a later step uses."""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from tests.docs.normalise import matches, moves, normalise
from tests.docs.processes import PageFailure

TRACEBACK = "Traceback (most recent call last):"
RAN_LOG = ".docs-files-run"
"""Where site/sitecustomize.py notes the page's Python files each process opens."""


def compare(where: str, expected: Sequence[str], actual: Sequence[str]) -> None:
    """Fail unless `actual` is what the page shows (normalise.py says what may differ)."""
    record_printed(where, actual)
    if not matches(expected, actual):
        compare_failed(where, "output differs", expected, actual)
    check_tables(where, expected, actual)


TABLE_EDGES = frozenset("┏┃┡│└┌├┗┣┠╞")
"""The first character of each line of a drawn table (rich's boxes)."""
TABLE_TOPS = frozenset("┏┌")
COLUMN_MARKS = frozenset("┏┳┓┃┡╇┩│└┴┘┌┬┐├┼┤┗┻┛┣╋┫╞╪╡")
"""Characters that stand where a column begins or ends."""


def check_tables(where: str, expected: Sequence[str], actual: Sequence[str]) -> None:
    """Spacing is not compared line by line (a value that moves changes a
    column's width), so a table shown is checked here: its columns in line from
    top to bottom, and, where none of its values moves, drawn exactly as printed."""
    printed = tables(actual)
    for table in tables(expected):
        lines = [line.rstrip() for line in table]
        marks = {column_marks(line) for line in lines}
        if len(marks) > 1:
            raise PageFailure(
                f"{where}: the table shown has its columns out of line (a column drawn "
                "narrower or wider than its header or its rows):\n" + "\n".join(lines)
            )
        if any(moves(line) for line in lines):
            continue
        same = [t for t in printed if normalise(t) == normalise(lines)]
        if same and not any([line.rstrip() for line in t] == lines for t in same):
            raise PageFailure(
                f"{where}: the table shown is drawn other than printed:\n"
                + "\n".join(lines)
                + "\nprinted:\n"
                + "\n".join(same[0])
            )


def tables(lines: Sequence[str]) -> list[list[str]]:
    """The drawn tables among the lines: each a run of lines that start with a
    box's edge, from its top edge (tables printed one under the other)."""
    found: list[list[str]] = []
    current: list[str] = []
    for line in [*lines, ""]:
        edge = line.strip()[:1]
        if current and (edge not in TABLE_EDGES or not edge or edge in TABLE_TOPS):
            found.append(current)
            current = []
        if edge and edge in TABLE_EDGES:
            current.append(line)
    return found


def column_marks(line: str) -> tuple[int, ...]:
    return tuple(index for index, char in enumerate(line) if char in COLUMN_MARKS)


def record_printed(where: str, actual: Sequence[str]) -> None:
    """For a writer refreshing a page's outputs (DUE_DOCS_PRINTED=file): what
    each step printed, added to that file."""
    printed_log = os.environ.get("DUE_DOCS_PRINTED")
    if printed_log:
        with open(printed_log, "a") as log:
            log.write(f"--- {where}\n" + "".join(f"{line}\n" for line in actual))


def compare_failed(
    where: str, what: str, expected: Sequence[str], actual: Sequence[str]
) -> NoReturn:
    diff = difflib.unified_diff(
        normalise(expected), normalise(actual), "shown", "printed", lineterm=""
    )
    raise PageFailure(
        f"{where}\n{what} (after normalising, see tests/docs/normalise.py):\n"
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
