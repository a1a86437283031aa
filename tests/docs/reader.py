"""A reader who follows one page from top to bottom, in an empty folder.

- ```python: run, each block after the one before, in one Python session (a
  later block uses what an earlier one defined). What it prints is compared
  with the ```text (or bare) block that comes next, when there is one; that
  block may show a traceback, as doctest does: then the block must raise, and
  the exception's last line is compared. A block whose first line is
  `# name.py` is saved as that file instead (`# name.py (continued)`: added
  to its end) and must be used by a later step: imported, or run
  (site/sitecustomize.py notes which files each process opens).
- ```console: each `$ ` command runs in the page's folder, through bash, with
  the virtual environment's `python` and `due` first on PATH, and its output
  (stdout and stderr, as a terminal shows them) is compared with the lines
  shown under it. A command must exit 0, unless the next one is `echo $?`,
  which shows its exit code. `export NAME=value` and `unset NAME` hold for the
  rest of the page's first terminal; `cd` and `source` are refused (the page
  stays in its folder).
- The markers of pages.py: fragments, commands in the background (a second
  terminal, which starts without the first one's exports), their output
  later, `^C` to stop one, commands whose output moves. A background command's
  output is held to what the page shows as a foreground one's is: each line it
  prints, in order, up to the last line shown (`...` for lines the page leaves
  out, where their number or order depends on timing).
- Any other block (a unit file, a Dockerfile, a manifest, and a ```text one
  marked fragment) is shown, not run, but the `due` commands in it are parsed
  (commands.py). A ```sh block must be marked fragment: a session is shown
  as ```console.

Each page gets a fresh folder and a fresh database: SQLite's `./due.db` in
that folder, and on PostgreSQL (pages marked `<!-- postgres -->`, and any
page that names a `postgresql://` URL) a schema of its own, which the page's
URLs stand for (urls.py), and which DUE_DATABASE_URL names when the page runs
on PostgreSQL. A port given as `--port N` is replaced by a free one, in that
command and in the later ones that name it (`127.0.0.1:N`). Nothing waits by
sleeping: each wait is on a condition, with a deadline.

To refresh the output a page shows, run it with DUE_DOCS_PRINTED=/tmp/printed.txt:
each step's output, as printed, is added to that file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.docs.checks import (
    check_python_reply,
    compare,
    compare_failed,
    files_run,
    record_printed,
    unused_files,
)
from tests.docs.commands import check_parses, due_commands_in_shell, due_commands_in_text
from tests.docs.normalise import ELLIPSIS, begins_with, matches, may_still_begin_with
from tests.docs.pages import (
    OUTPUT_LANGUAGES,
    SHELL_LANGUAGES,
    Block,
    Command,
    Page,
    console_commands,
    shown_lines,
)
from tests.docs.processes import COMMAND_SECONDS, Background, PageFailure, PythonSession
from tests.docs.urls import Databases
from tests.helpers.ports import free_port
from tests.helpers.waiting import TimedOut, wait_until

SITE = Path(__file__).resolve().parent / "site"
SOURCE = SITE.parents[2] / "src"
NOT_PYTHON = frozenset({"py", "python3", "pycon", "ipython", "ipython3"})
REFUSED_COMMANDS = frozenset({"cd", "source", ".", "pushd", "popd", "alias"})
PORT_OPTION = re.compile(r"--port(?:=|\s+)(\d+)")
DATABASE = re.compile(r"\bdatabase=\S+")


@dataclass
class Reader:
    page: Page
    folder: Path
    databases: Databases = field(default_factory=lambda: Databases(None))
    """What the page's `postgresql://` URLs stand for (tests/docs/urls.py)."""
    on_postgres: bool = False
    """Run with DUE_DATABASE_URL set to the page's schema (a `<!-- postgres -->` page)."""
    python: Path = Path(sys.executable)
    """The virtual environment's Python: its `python`, `due` and the rest are on PATH."""
    own_source: bool = True
    """The repository's src/ before the installed due (a worktree's code); False
    for a virtual environment that installed due as a reader does."""
    env: dict[str, str] = field(init=False)
    background: list[Background] = field(default_factory=list)
    session: PythonSession | None = None
    files: dict[Path, tuple[int, int]] = field(default_factory=dict)
    """Files written by the page: the line of the block that last wrote each, and
    how many files had been opened then (it must be opened after)."""
    rewritten: list[str] = field(default_factory=list)
    ports: dict[str, str] = field(default_factory=dict)
    last_code: int = 0

    def __post_init__(self) -> None:
        self.env = self.base_env()

    def base_env(self) -> dict[str, str]:
        """A terminal of the reader's: the virtual environment on PATH, nothing else
        of the machine's (no DUE_* variable of the test run leaks in)."""
        env = {
            "PATH": f"{self.python.parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.folder),
            "LC_ALL": "C.UTF-8",
            "TZ": "UTC",
            "PYTHONUNBUFFERED": "1",  # output in the order a terminal shows it
            "PYTHONDONTWRITEBYTECODE": "1",  # every import opens its .py (site/)
            # The repository's own src/ before the installed due (a worktree's code).
            "PYTHONPATH": os.pathsep.join([str(SITE), *([str(SOURCE)] if self.own_source else [])]),
            "DUE_DOCS_PAGE_FOLDER": str(self.folder),
        }
        if self.on_postgres:
            assert self.databases.direct is not None
            env["DUE_DATABASE_URL"] = self.databases.direct
        return env

    # --- the page, block by block ------------------------------------------------

    def follow(self) -> None:
        if self.page.problems:
            raise PageFailure("\n".join(self.page.problems))
        blocks = self.page.blocks
        consumed: set[int] = set()
        try:
            for index, block in enumerate(blocks):
                if index in consumed:
                    continue
                following = blocks[index + 1] if index + 1 < len(blocks) else None
                if self._follow(block, following):
                    consumed.add(index + 1)
            self._stop_background()
            if self.session is not None:
                self.session.close()
            unused = unused_files(self.folder, self.files)
            if unused:
                raise PageFailure(
                    "files the page writes but no later step imports or runs (mark the "
                    "block <!-- fragment --> if it is only shown):\n"
                    + "\n".join(f"{self.page.path}:{line}: {name}" for name, line in unused)
                )
        finally:
            for running in self.background:
                running.kill()
            if self.session is not None:
                self.session.kill()

    def _follow(self, block: Block, following: Block | None) -> bool:
        """Do what the block asks; True when it used the next block (its output)."""
        self._check_markers(block)
        if block.language == "python":
            return self._python(block, following)
        if block.language == "console":
            self._console(block)
        elif block.language in SHELL_LANGUAGES:
            if "fragment" not in block.markers:
                raise PageFailure(
                    f"{block.where}: a ```{block.language} block is not run: show a "
                    "```console session (`$ ` before each command), or mark it "
                    "<!-- fragment -->"
                )
            for line in block.lines:
                self._parse_only(block, due_commands_in_shell(line))
        elif block.language in NOT_PYTHON and "fragment" not in block.markers:
            raise PageFailure(f"{block.where}: write ```python (a ```{block.language} is not run)")
        elif "background-output" in block.markers:
            self._background_output(block)
        elif block.language not in OUTPUT_LANGUAGES or "fragment" in block.markers:
            for line in block.lines:  # a unit file, a Dockerfile, a manifest
                self._parse_only(block, due_commands_in_text(line))
        return False

    def _check_markers(self, block: Block) -> None:
        allowed = {"fragment"}
        if block.language == "console":
            allowed |= {"background", "eventually", "background-output"}
        elif block.language in OUTPUT_LANGUAGES:
            allowed |= {"background-output"}
        misplaced = block.markers - allowed
        if misplaced:
            raise PageFailure(
                f"{block.where}: <!-- {sorted(misplaced)[0]} --> does not apply to a "
                f"```{block.language} block"
            )
        if len(block.markers) > 1:
            raise PageFailure(f"{block.where}: one marker a block ({sorted(block.markers)})")

    # --- Python ---------------------------------------------------------------------

    def _python(self, block: Block, following: Block | None) -> bool:
        if "fragment" in block.markers:
            self._compile(block, block.text)
            return False
        code = self._with_urls(block.text)
        header = block.file_header
        if header is not None:
            self._write_file(block, header["path"], bool(header["continued"]), code)
            return False
        expected = None
        if following is not None and following.language in OUTPUT_LANGUAGES:
            expected = None if following.markers else shown_lines(following)
        session = self._session()
        reply = session.run(block, code, self.rewritten)
        self.rewritten = []
        check_python_reply(block.where, reply, expected, session.log_text())
        return expected is not None

    def _compile(self, block: Block, code: str, line: int | None = None) -> None:
        try:
            compile("\n" * ((line or block.line) - 1) + code, str(block.page), "exec")
        except SyntaxError as error:
            raise PageFailure(f"{block.where}: not Python: {error}") from None

    def _write_file(self, block: Block, name: str, continued: bool, code: str) -> None:
        body = code.split("\n", 1)[1]
        self._compile(block, body, block.line + 1)
        path = self.folder / name
        if continued and path not in self.files:
            raise PageFailure(f"{block.where}: continues {name}, which no block above wrote")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if continued else "w") as out:
            out.write(body)
        if continued:
            self._compile(block, path.read_text(), 1)
        # It must be used after this write: by what the page runs from here on.
        self.files[path] = (block.line, len(files_run(self.folder)))
        self.rewritten.append(str(path))

    def _session(self) -> PythonSession:
        if self.session is None:
            self.session = PythonSession.start(self.folder, self.env, self.python)
        return self.session

    # --- console ----------------------------------------------------------------------

    def _console(self, block: Block) -> None:
        if block.lines and block.lines[0].strip() == "^C":
            self._stop_last(block)
            return
        if "background-output" in block.markers:
            self._background_output(block)
            return
        try:
            commands = console_commands(block)
        except ValueError as error:
            raise PageFailure(str(error)) from None
        if "fragment" in block.markers:
            for command in commands:
                self._parse_only(block, due_commands_in_shell(command.text))
        elif "background" in block.markers:
            self._start_background(block, commands)
        else:
            eventually = "eventually" in block.markers
            for index, command in enumerate(commands):
                shows_code = index + 1 < len(commands) and commands[index + 1].text == "echo $?"
                self._run(block, command, eventually=eventually, may_fail=shows_code)

    def _run(self, block: Block, command: Command, *, eventually: bool, may_fail: bool) -> None:
        where = f"{block.page}:{command.line}: $ {command.text}"
        words = shlex.split(command.text, comments=True) or [""]
        if words[0] in REFUSED_COMMANDS:
            raise PageFailure(f"{where}: the harness keeps each page in its folder")
        if words[0] in ("export", "unset"):
            self._set_variables(where, words, self.env)
            compare(where, command.output, [])
            return
        if command.text == "echo $?":
            compare(where, command.output, [str(self.last_code)])
            return
        text = self._substituted(command.text)

        def attempt() -> tuple[int, list[str]]:
            done = subprocess.run(
                ["bash", "-c", text],
                cwd=self.folder,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=COMMAND_SECONDS,
            )
            return done.returncode, done.stdout.decode(errors="replace").splitlines()

        shown = self._as_run(command.output)
        code, printed = attempt()
        if eventually and not matches(shown, printed):
            # Something that moves (progress, a next run): look again until it shows
            # what the page shows, as a reader would.
            def shows() -> bool:
                nonlocal code, printed
                code, printed = attempt()
                return matches(shown, printed)

            with contextlib.suppress(TimedOut):
                wait_until(shows, timeout=COMMAND_SECONDS, every=0.2)
        self.last_code = code
        if code != 0 and not may_fail:
            raise PageFailure(f"{where}\nexited {code}:\n" + "\n".join(printed))
        compare(where, shown, printed)

    def _set_variables(self, where: str, words: list[str], env: dict[str, str]) -> None:
        for word in words[1:]:
            if words[0] == "unset":
                env.pop(word, None)
                continue
            name, equals, value = word.partition("=")
            if not equals:
                raise PageFailure(f"{where}: export NAME=value, please")
            env[name] = self._with_urls(value)

    def _parse_only(self, block: Block, commands: list[list[str]]) -> None:
        for args in commands:
            try:
                check_parses(args)
            except AssertionError as error:
                raise PageFailure(f"{block.where}: {error}") from None

    # --- background ------------------------------------------------------------------

    def _start_background(self, block: Block, commands: list[Command]) -> None:
        env = self.base_env()  # a second terminal: the first one's exports are not there
        *setup, command = commands
        for step in setup:
            words = shlex.split(step.text)
            if words[:1] != ["export"]:
                raise PageFailure(
                    f"{block.where}: a background block runs one command (after `export`s)"
                )
            self._set_variables(f"{block.where}: {step.text}", words, env)
        log = self.folder / f".background-{command.line}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", "exec " + self._substituted(command.text)],
                cwd=self.folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, as a terminal's job
            )
        running = Background(command, process, log)
        self.background.append(running)
        self._wait_for_output(block, running, self._as_run(command.output))

    def _background_output(self, block: Block) -> None:
        self._wait_for_output(block, self._last_running(block), self._as_run(shown_lines(block)))

    def _wait_for_output(self, block: Block, running: Background, expected: list[str]) -> None:
        if not any(line.strip() for line in expected):
            raise PageFailure(
                f"{block.where}: show what `{running.command.text}` prints once it has "
                "started (the page goes on when it has printed it)"
            )
        ends: list[int] = []

        def shown() -> bool:
            exited = running.process.poll() is not None
            printed = running.lines()[running.seen :]
            end = begins_with(expected, printed)
            if end is None and (exited or not may_still_begin_with(expected, printed)):
                why = f"exited {running.process.returncode} before showing" if exited else "showed"
                compare_failed(block.where, f"`{running.command.text}` {why}", expected, printed)
            ends.extend([] if end is None else [end])
            return end is not None

        try:
            wait_until(shown, timeout=COMMAND_SECONDS, every=0.05)
        except TimedOut:
            compare_failed(
                block.where,
                f"`{running.command.text}` did not show, within {COMMAND_SECONDS:.0f}s",
                expected,
                running.lines()[running.seen :],
            )
        record_printed(
            f"{block.where}: {running.command.text}", running.lines()[running.seen :][: ends[-1]]
        )
        running.seen += ends[-1]

    def _stop_last(self, block: Block) -> None:
        running = self._last_running(block)
        code = running.stop()
        self.background.remove(running)
        if code != 0:
            raise PageFailure(f"{block.where}: `{running.command.text}` exited {code} on Ctrl-C")
        # What it printed last is what the page shows after ^C: before it, the
        # lines of work done since the page last looked (how many runs of a
        # schedule, say) depend on when the reader pressed Ctrl-C.
        expected = [ELLIPSIS, *self._as_run(shown_lines(block)[1:])]
        printed = running.lines()[running.seen :]
        record_printed(f"{block.where}: ^C", printed)
        if not matches(expected, printed):
            compare_failed(
                block.where, f"after Ctrl-C, `{running.command.text}` showed", expected, printed
            )

    def _last_running(self, block: Block) -> Background:
        if not self.background:
            raise PageFailure(f"{block.where}: no command runs in the background")
        return self.background[-1]

    def _stop_background(self) -> None:
        """The end of the page: each terminal's command is stopped with Ctrl-C."""
        while self.background:
            running = self.background.pop()
            code = running.stop()
            if code != 0:
                raise PageFailure(
                    f"{running.command.line}: `{running.command.text}` exited {code} "
                    f"on Ctrl-C:\n{running.log.read_text()}"
                )

    # --- what the page ran ---------------------------------------------------------

    def _as_run(self, shown: Sequence[str]) -> list[str]:
        """The output shown, as this run prints it: a page marked to run on both
        stores shows one database a worker logs (`database=...`), which stands
        for the store of the run. Any other page shows the one it uses."""
        if not self.page.postgres:
            return list(shown)
        run = "postgresql://the-page-s-schema" if self.on_postgres else "sqlite:///due.db"
        return [DATABASE.sub(f"database={run}", line) for line in shown]

    def _substituted(self, text: str) -> str:
        text = self._with_urls(text, quote=True)
        for port in PORT_OPTION.findall(text):
            self.ports.setdefault(port, str(free_port()))
        for shown, used in self.ports.items():
            text = re.sub(rf"(--port(?:=|\s+)|:){shown}\b", rf"\g<1>{used}", text)
        return text

    def _with_urls(self, text: str, *, quote: bool = False) -> str:
        try:
            return self.databases.substituted(text, quote=quote)
        except AssertionError as error:
            raise PageFailure(f"{self.page.path}: {error}") from None
