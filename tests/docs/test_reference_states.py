"""The job states page draws and lists exactly the code's transition table.

docs/reference/states.md shows the transitions twice, as a drawing (a text
block) and as a table; core/jobs.py's docstring carries the same drawing. Each
is read back into (from, to) pairs and held to TRANSITIONS, so that neither can
drift from the code.
"""

from __future__ import annotations

import re
from pathlib import Path

from due.core import jobs
from due.core.jobs import TRANSITIONS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "states.md"
ARROW = re.compile(r"─►\s*(\w+)")
SOURCE = re.compile(r"^(\(?\w+\)?)\s")
TABLE_ROW = re.compile(r"^\|\s*`(\w+)`\s*\|\s*`(\w+)`\s*\|")

Edges = set[tuple[str, str]]


def code_edges() -> Edges:
    return {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}


def drawing_of(text: str) -> str:
    """The first ```text block of a Markdown page."""
    match = re.search(r"```text\n(.*?)```", text, re.DOTALL)
    assert match, "no ```text block (the drawing) on the page"
    return match.group(1)


def drawn_edges(drawing: str) -> Edges:
    """Each `─► target` counts from the state that starts its paragraph's line."""
    edges: Edges = set()
    source = None
    for line in drawing.splitlines():
        start = SOURCE.match(line)
        if start:
            source = start.group(1)
        for target in ARROW.findall(line):
            assert source is not None, f"an arrow before any state: {line!r}"
            if source != "(enqueue)":
                edges.add((source, target))
    return edges


def tabled_edges(text: str) -> Edges:
    return {(m.group(1), m.group(2)) for m in map(TABLE_ROW.match, text.splitlines()) if m}


def test_the_pages_drawing_is_the_transition_table() -> None:
    assert drawn_edges(drawing_of(PAGE.read_text())) == code_edges()


def test_the_pages_table_is_the_transition_table() -> None:
    assert tabled_edges(PAGE.read_text()) == code_edges()


def test_the_code_carries_the_pages_drawing() -> None:
    page = drawing_of(PAGE.read_text()).strip("\n")
    indented = "\n".join(f"    {line}" if line else "" for line in page.splitlines())
    assert indented in (jobs.__doc__ or ""), (
        "core/jobs.py's drawing differs from docs/reference/states.md's"
    )


def test_the_reader_finds_what_the_drawing_misses() -> None:
    # The parser itself: an edge left out of a drawing is seen as missing.
    drawing = "queued ───┬─ claimed ──► running\n          └─ cancelled ─► cancelled\n"
    assert drawn_edges(drawing) == {("queued", "running"), ("queued", "cancelled")}
