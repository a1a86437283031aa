"""How the `due` command prints: tables that fit, times with their zone, JSON.

In a terminal, a table too wide for it first drops its low-value columns,
then wraps (folds) what is left; no cell is cut short. When stdout is not a
terminal (a pipe, a file, a script), nothing is dropped or cut: tables take
the width they need. `--json` prints one JSON document instead (docs/reference/json.md).

What is printed holds text a task wrote (its error, its traceback, its
arguments, its name): its control characters are printed as escapes
(`\x1b`), never sent, so that no job can move the cursor, recolour the
screen, set the window's title or write the clipboard (OSC 52) of whoever
looks at it (`terminal_safe`). JSON escapes them too, C1 controls included.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

UNLIMITED_WIDTH = 100_000

# C0 controls but tab and newline, DEL, C1 controls (an 8-bit CSI, OSC...),
# and the bidirectional overrides and isolates, which reorder what is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """`text` with its control characters as escapes, `\\x1b` or `\\u202e`."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class _Console(Console):
    """A rich Console whose text (every string printed, every cell of a table)
    is made terminal-safe before it is laid out."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(terminal_safe(text), **options)


def make_console(*, stderr: bool = False) -> Console:
    """A console that fits the terminal, or never truncates when there is none.

    Markup is off: what is printed holds task names, arguments and error
    messages, whose brackets must print as they are; styles are given as
    `rich.text.Text` instead.
    """
    console = _Console(stderr=stderr, markup=False, highlight=False)
    if console.is_terminal:
        return console
    return _Console(
        stderr=stderr, width=UNLIMITED_WIDTH, soft_wrap=True, markup=False, highlight=False
    )


console = make_console()
errors = make_console(stderr=True)


@dataclass(frozen=True)
class Column:
    header: str
    drop_rank: int | None = None
    """None: always shown. Otherwise, in a narrow terminal, columns are dropped
    lowest rank first until the table fits."""
    justify: str = "left"


def fitted_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[RenderableType]],
    target: Console | None = None,
    **table_options: Any,
) -> Table:
    """A table of `rows` that fits `target`'s width (see the module docstring)."""
    target = target or console
    kept = list(range(len(columns)))
    empty = {i for i in kept if all(_is_blank(row[i]) for row in rows)}
    while True:
        table = _table([columns[i] for i in kept], [[row[i] for i in kept] for row in rows])
        for name, value in table_options.items():
            setattr(table, name, value)
        droppable = [i for i in kept if columns[i].drop_rank is not None]
        if not droppable or _natural_width(table, target) <= target.width:
            return table
        # An empty column goes first, then the one of least value.
        kept.remove(min(droppable, key=lambda i: (i not in empty, columns[i].drop_rank or 0)))


def _is_blank(cell: RenderableType) -> bool:
    return isinstance(cell, str | Text) and not str(cell).strip()


def _natural_width(table: Table, target: Console) -> int:
    """The width the table takes with room to spare (a plain measure stops at the
    console's width, which would always look like a fit)."""
    unlimited = target.options.update(max_width=UNLIMITED_WIDTH)
    return target.measure(table, options=unlimited).maximum


def _table(columns: Sequence[Column], rows: Sequence[Sequence[RenderableType]]) -> Table:
    table = Table()
    for column in columns:
        table.add_column(column.header, overflow="fold", justify=column.justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    return table


def time_text(value: datetime | None) -> str:
    """An instant as people read it, with its zone (UTC, the database's)."""
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def seconds_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    if seconds < 86400:
        return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"
    return f"{seconds // 86400:.0f}d{seconds % 86400 // 3600:02.0f}h"


def counted(count: int, noun: str) -> str:
    """`1 queue`, `2 queues`, `0 queues`: a count as a sentence says it."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def json_text(value: Any) -> str:
    """A stored value (arguments, a result, a checkpoint) as JSON on one line."""
    return json.dumps(value, ensure_ascii=False, default=str)


def print_json(document: Any) -> None:
    """One JSON document on stdout (`--json`): times in ISO 8601 with their offset."""
    text = json.dumps(document, indent=2, ensure_ascii=False, default=_iso)
    # JSON escapes C0 controls itself; the others (only ever inside strings) too.
    sys.stdout.write(_CONTROL.sub(lambda c: f"\\u{ord(c[0]):04x}", text) + "\n")


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def print_verbatim(text: str) -> None:
    """Text as it was written (a traceback): no wrapping, no markup; its
    control characters as escapes (`terminal_safe`)."""
    text = terminal_safe(text)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
