"""Reading the reference pages back: their sections and tables, as the tests hold
them to the code."""

from __future__ import annotations

import re
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"


def section(page: str, title: str, level: int = 2) -> str:
    """The text under a heading of `page` (reference/{page}.md), up to the next
    heading of the same level or above."""
    text = (REFERENCE / f"{page}.md").read_text()
    marks = "#" * level
    parts = re.split(rf"^{marks} {re.escape(title)}\n", text, maxsplit=1, flags=re.MULTILINE)
    assert len(parts) == 2, f"reference/{page}.md has no section {title!r}"
    return re.split(rf"^#{{1,{level}}} ", parts[1], maxsplit=1, flags=re.MULTILINE)[0]


def table(text: str) -> list[list[str]]:
    """The rows of the first Markdown table in `text` (not its header), as cells."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break  # the end of the first table
    assert len(lines) >= 2, "no table"
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def names(cell: str) -> list[str]:
    """The names in backticks in a cell."""
    return re.findall(r"`([^`]+)`", cell)
