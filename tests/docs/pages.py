"""A documentation page as the harness reads it: its fenced blocks, each with
the markers written right before it, and what the harness is to do with each.

Markers are HTML comments on a line of their own (invisible once rendered),
between the prose and a block's opening fence:

    <!-- fragment -->            the block is only a fragment: a ```python one is
                                 compiled, not run; a ```console one (or sh) has
                                 its `due ...` commands parsed (the subcommand's
                                 --help works and the options given exist)
    <!-- background -->          a ```console block whose one command runs until
                                 stopped (`due worker`, `due dashboard`): "in a
                                 second terminal". What it prints must begin with
                                 the output shown (every line, in order; `...`
                                 for any lines) before the page goes on; it is
                                 stopped (Ctrl-C) at the end of the page, or by a
                                 block `^C`, under which its last lines are shown
    <!-- background-output -->   the next lines printed by the last command
                                 started in the background ("in the worker's
                                 terminal you see"): every line, in order, as
                                 for its start
    <!-- eventually -->          a ```console block that looks at something that
                                 moves (progress, a schedule's next run): its
                                 commands run again until their output matches

and, anywhere on the page, on a line of its own:

    <!-- postgres -->            the page runs on PostgreSQL too

Any other `<!-- word -->` right before a fence is a typo, and fails the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MARKERS = frozenset({"fragment", "background", "background-output", "eventually"})
PAGE_MARKER_POSTGRES = "<!-- postgres -->"
MARKER_LINE = re.compile(r"^\s*<!--\s*([\w-]+)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
FILE_HEADER = re.compile(r"^# (?P<path>[\w./-]+\.py)(?P<continued> \(continued\))?\s*$")
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "zsh", "shell-session", "shellsession"})
OUTPUT_LANGUAGES = frozenset({"", "text"})
CODE_DIRECTIVES = frozenset({"{code-block}", "{code}", "{sourcecode}"})


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its language, its lines, its markers."""

    page: Path
    line: int
    """The line of its first body line (1-based), as the reader's editor shows it."""
    language: str
    lines: tuple[str, ...]
    markers: frozenset[str] = frozenset()

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    @property
    def file_header(self) -> re.Match[str] | None:
        """`# name.py` (save as that file) or `# name.py (continued)` (append to it)."""
        return FILE_HEADER.match(self.lines[0]) if self.lines else None


@dataclass
class Page:
    path: Path
    blocks: list[Block]
    postgres: bool
    problems: list[str] = field(default_factory=list)
    """What the page asks that the harness cannot do (a failure, never a skip)."""

    def run_text(self) -> str:
        """The text of the blocks the harness runs (not their fragments): where
        the databases a page needs are named."""
        return "".join(
            block.text
            for block in self.blocks
            if block.language in ("python", "console") and "fragment" not in block.markers
        )


def read_page(path: Path, shown_as: Path | None = None) -> Page:
    text = path.read_text()
    name = shown_as or path
    lines = text.splitlines()
    page = Page(name, [], postgres=PAGE_MARKER_POSTGRES in lines)
    _collect(lines, 0, name, page)
    return page


def _collect(lines: list[str], offset: int, name: Path, page: Page) -> None:
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        info = opening["info"].strip()
        close = _closing(lines, index + 1, fence)
        body = [_unindent(line, indent) for line in lines[index + 1 : close]]
        markers = _markers_before(lines, index, name, offset, page)
        start = offset + index + 2
        directive = info.split(maxsplit=1)
        if info.startswith("{") and directive[0] in CODE_DIRECTIVES:
            page.problems.append(
                f"{name}:{start}: a {directive[0]} directive: write a plain fence "
                "(```python, ```console), which the harness runs"
            )
        elif info.startswith("{"):
            _collect(body, offset + index + 1, name, page)  # a directive's body may hold blocks
        else:
            language = info.split()[0] if info else ""
            page.blocks.append(Block(name, start, language, tuple(body), frozenset(markers)))
        index = close + 1


def _closing(lines: list[str], start: int, fence: str) -> int:
    """The index of the fence that closes one opened with `fence` (or the end)."""
    for index in range(start, len(lines)):
        stripped = lines[index].strip()
        if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
            return index
    return len(lines)


def _unindent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip()


def _markers_before(lines: list[str], index: int, name: Path, offset: int, page: Page) -> list[str]:
    """The marker comments on the lines right above a fence (blank lines allowed)."""
    markers = []
    above = index - 1
    while above >= 0:
        line = lines[above]
        if not line.strip():
            above -= 1
            continue
        marker = MARKER_LINE.match(line)
        if not marker or line.strip() == PAGE_MARKER_POSTGRES:
            break
        if marker[1] not in MARKERS:
            page.problems.append(
                f"{name}:{offset + above + 1}: unknown marker <!-- {marker[1]} --> "
                f"(known: {', '.join(sorted(MARKERS))})"
            )
        markers.append(marker[1])
        above -= 1
    return markers


@dataclass(frozen=True)
class Command:
    """A `$ ` line of a console block (joined with its `\\` continuations) and
    the output shown under it."""

    line: int
    text: str
    output: tuple[str, ...]


def console_commands(block: Block) -> list[Command]:
    """The commands of a console block. Text before the first `$ ` is refused
    by the caller (a session starts with a prompt)."""
    commands: list[Command] = []
    pending: list[str] = []
    index = 0
    while index < len(block.lines):
        line = block.lines[index]
        if not line.startswith("$ "):
            pending.append(line)
            index += 1
            continue
        if commands:
            commands[-1] = _with_output(commands[-1], pending)
        elif any(text.strip() for text in pending):
            raise ValueError(f"{block.where}: text before the first `$ ` command")
        pending = []
        text = line[2:]
        start = index
        while text.endswith("\\") and index + 1 < len(block.lines):
            index += 1
            text = text[:-1] + " " + block.lines[index].removeprefix("> ").strip()
        commands.append(Command(block.line + start, text.strip(), ()))
        index += 1
    if commands:
        commands[-1] = _with_output(commands[-1], pending)
    return commands


def _with_output(command: Command, output: list[str]) -> Command:
    return Command(command.line, command.text, tuple(output))


def shown_lines(block: Block) -> list[str]:
    """A block's lines without trailing blank ones."""
    lines = list(block.lines)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines
