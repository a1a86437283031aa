"""What may differ between the output a page shows and the output a run prints.

Both sides go through the same rules, line by line, then are compared:

- times: `2026-12-04 20:04:22,684`, `2026-12-04T20:04:22+00:00`, `... UTC`,
  `20:04:22` -> `<time>`
- durations: `duration_ms=1.4`, `4s`, `1m12s`, `≤5ms`, `12.5 s` -> `<duration>`
- a worker's id (`host:pid:xxxx`) -> `<worker>`; `pid=123` -> `pid=<pid>`
- job ids: `job=12`, `job 12`, `parent=12`, `"id": 12`, and a number alone in
  the first cell of a table's row -> `<id>`
- ports of a local address (`127.0.0.1:8080`, `localhost:9464`) -> `<port>`
- a PostgreSQL URL -> `<postgresql-url>` (the harness runs on a schema of its
  own); a SQLite URL is compared as it is (on a page that runs on both stores,
  reader.py reads the database a worker logs as the run's)
- progress read at a moment: `32/100 (32%)`, and the `done/total` count on a
  row that draws a bar -> `<progress>`
- the event loop a worker logs (`loop=uvloop` when it is installed, else
  `loop=asyncio`) -> `loop=<loop>`
- spacing: runs of spaces, and of a table's or a bar's rule characters, count
  as one (a value normalised above changes a column's width), trailing spaces
  and trailing blank lines do not count; but a table is drawn as printed
  (checks.py): its columns in line, and where no value in it moves, exactly
  as wide as printed

An expected line that is exactly `...` stands for any number of lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ELLIPSIS = "..."
BAR = "━"
RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"postgres(?:ql)?://[^\s'\"]+"), "<postgresql-url>"),
    (
        re.compile(
            r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
            r"(?: ?(?:UTC|Z|[+-]\d{2}:?\d{2}))?"
        ),
        "<time>",
    ),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}\b"), "<time>"),
    (re.compile(r"\b[\w.-]+:\d+:[0-9a-f]{4}\b"), "<worker>"),
    (re.compile(r"\bpid([= ])\d+"), r"pid\1<pid>"),
    (re.compile(r"\b(127\.0\.0\.1|localhost|0\.0\.0\.0):\d+"), r"\1:<port>"),
    (re.compile(r"\b(job|parent|job_id|id)([= ])\d+\b"), r"\1\2<id>"),
    (re.compile(r'"(id|job_id|parent_id)": \d+'), r'"\1": <id>'),
    (re.compile(r"^([│|] ?)\d+( ?[│|])"), r"\1<id>\2"),
    (re.compile(r"\bduration_ms=[\d.]+"), "duration_ms=<duration>"),
    (
        re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b(?![\w-])|\b(?:\d+(?:\.\d+)?[dhms])+\b"),
        "<duration>",
    ),
    (re.compile(r"\b\d+(?:\.\d+)?/\d+(?:\.\d+)? \(\d+%\)"), "<progress>"),
    (re.compile(r"\bloop=(?:uvloop|asyncio)\b"), "loop=<loop>"),
]
BAR_ROW_COUNT = re.compile(r"\b\d+(?:\.\d+)?/\d+(?:\.\d+)?\b")
RULE_RUNS = re.compile(r"([━─═])\1+")
BAR_ENDS = re.compile(r"[╸╺]")
SPACES = re.compile(r"[ \t]+")


def normalise_line(line: str) -> str:
    line = SPACES.sub(" ", line)
    for pattern, replacement in RULES:
        line = pattern.sub(replacement, line)
    if draws_a_bar(line):
        line = BAR_ROW_COUNT.sub("<progress>", line)
    line = BAR_ENDS.sub(BAR, line)
    line = RULE_RUNS.sub(r"\1", line)
    return SPACES.sub(" ", line).rstrip()


def draws_a_bar(line: str) -> bool:
    """A progress bar's row (not a table's heavy rule, drawn with the same ━)."""
    return BAR in line and line.lstrip()[:1] not in "┏┡└┌├┃┗┣"


def moves(line: str) -> bool:
    """Whether the line holds a value that may differ from run to run (a time, an
    id, a bar...): the rules above change it beyond its spacing."""
    spaced = SPACES.sub(" ", line)
    return draws_a_bar(line) or any(pattern.search(spaced) for pattern, _ in RULES)


def normalise(lines: Sequence[str]) -> list[str]:
    normalised = [normalise_line(line) for line in lines]
    while normalised and not normalised[-1]:
        normalised.pop()
    while normalised and not normalised[0]:
        normalised.pop(0)
    return normalised


def matches(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Whether `actual` is `expected` line for line (a `...` line: any lines)."""
    return _match(normalise(expected), normalise(actual))


def _match(expected: list[str], actual: list[str]) -> bool:
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == ELLIPSIS:
        return any(_match(rest, actual[skip:]) for skip in range(len(actual) + 1))
    return bool(actual) and actual[0] == head and _match(rest, actual[1:])


def begins_with(expected: Sequence[str], actual: Sequence[str]) -> int | None:
    """How many lines of `actual` (a running process's output so far) are the
    expected lines, when its output begins with exactly those (a `...` line: any
    lines); None when it does not begin so, yet or at all."""
    wanted = normalise(expected)
    seen = [normalise_line(line) for line in actual]
    last = wanted[-1] if wanted else ELLIPSIS
    for end in range(len(seen) + 1):
        if (last == ELLIPSIS or (end and seen[end - 1] == last)) and _match(wanted, seen[:end]):
            return end
    return None


def may_still_begin_with(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Whether more output could still make `actual` begin with the expected lines:
    False once a line printed is one the page does not show there."""
    return _prefix(normalise(expected), [normalise_line(line) for line in actual])


def _prefix(expected: list[str], actual: list[str]) -> bool:
    if not actual or not expected:
        return True  # more may come; or all shown (begins_with has found it)
    head, rest = expected[0], expected[1:]
    if head == ELLIPSIS:
        return True  # any lines may follow, then the rest
    return actual[0] == head and _prefix(rest, actual[1:])
