"""The README is a contract: every snippet and every `due` command it shows
runs, and prints what it shows.

The README is followed from top to bottom as a new user would, in an empty
folder, on both stores:

- a ```python block whose first line is `# name.py` is saved as that file;
  any other is run as a script, and when its `print(...)` lines end in a
  comment, it must print those comments, line for line;
- a ```console block is a shell session: each `$ due ...` line is run and
  must succeed, and the lines after it, if any, are what it must print on
  stdout (`...` stands for any text: an id, a list that grows);
- a command that runs until stopped (`due worker`, `due dashboard`) is
  started, must report that it started, keeps running for the steps after it
  (a snippet waits for a job it runs), and must exit 0 on SIGTERM at the end;
- every inline `due ...` is run and must succeed;
- a block marked `<!-- fragment -->` on the line before its fence is not run:
  a Python fragment must compile, and a shell fragment may only install the
  package (its extras must exist) or run a make target (which must exist).
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.ports import free_port
from tests.helpers.waiting import wait_until
from tests.helpers.workers import REPOSITORY

pytestmark = pytest.mark.slow
README = REPOSITORY / "README.md"
RUNS_UNTIL_STOPPED = {
    "worker": "worker.started",
    "scheduler": "worker.started",
    "metrics": "serving metrics on",
    "dashboard": "dashboard on http://",
}
"""Commands that run until stopped, and what each prints once it has started."""
STOP_SECONDS = 30
"""How long a command that runs until stopped has to exit after SIGTERM (it
takes under a second; the rest is room for a loaded CI machine)."""
REPORTS_STATE = {"check": (0, 1, 2)}
"""Commands whose exit code is the state they report (`due check`: ok, warning,
critical), and the codes that mean they worked."""
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
FRAGMENT = "<!-- fragment -->"
INLINE_COMMAND = re.compile(r"(?<!`)`(due [^`]+)`")
PRINTS = re.compile(r"^\s*print\(.*\)\s+# (.+)$")
LINK = re.compile(r"\]\(([^)#\s]+)")


@dataclass(frozen=True)
class Step:
    kind: str  # "file", "python", "command", or "fragment" (Python or shell, not run)
    text: str
    line: int
    name: str = ""
    expected: tuple[str, ...] = ()
    """What it must print, line by line (nothing given: not compared)."""


def readme_steps(text: str) -> list[Step]:
    steps: list[Step] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            for command in INLINE_COMMAND.findall(lines[index]):
                steps.append(Step("command", command, index + 1))
            index += 1
            continue
        fragment = index > 0 and lines[index - 1].strip() == FRAGMENT
        indent, language = fence.groups()
        start = index + 1
        index = start
        while not FENCE.match(lines[index]):
            index += 1
        body = [line.removeprefix(indent) for line in lines[start:index]]
        index += 1
        steps.extend(_block_steps(language, body, start + 1, fragment))
    return steps


def _block_steps(language: str, body: list[str], line: int, fragment: bool) -> Iterator[Step]:
    if language == "python":
        yield _python_step(body, line, fragment)
    elif language == "console":
        yield from _session_steps(body, line, fragment)
    else:
        shown = [b for b in body if b.startswith(("due ", "$ "))]
        assert not shown, f"README line {line}: a shell session goes in ```console"


def _python_step(body: list[str], line: int, fragment: bool) -> Step:
    text = "\n".join(body) + "\n"
    if fragment:
        return Step("fragment", text, line, name="python")
    first = body[0].strip()
    if re.fullmatch(r"# \w+\.py", first):
        return Step("file", "\n".join(body[1:]) + "\n", line, first[2:])
    prints = [b for b in body if b.lstrip().startswith("print(")]
    expected = tuple(m.group(1) for b in prints if (m := PRINTS.match(b)))
    assert len(expected) in (0, len(prints)), (
        f"README line {line}: show the output of every print, or of none"
    )
    return Step("python", text, line, expected=expected)


def _session_steps(body: list[str], line: int, fragment: bool) -> Iterator[Step]:
    commands: list[tuple[int, str, list[str]]] = []
    for offset, text in enumerate(body):
        if text.startswith("$ "):
            commands.append((line + offset, text[2:], []))
        else:
            assert commands, f"README line {line + offset}: output before any command"
            commands[-1][2].append(text)
    for at, command, output in commands:
        if fragment:
            yield Step("fragment", command, at, name="shell")
            continue
        assert command.startswith("due "), f"README line {at}: only due runs here: {command}"
        yield Step("command", command, at, expected=tuple(output))


def shown(expected: tuple[str, ...], printed: str) -> bool:
    """Whether `printed` is what the README shows, `...` standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in "\n".join(expected).split("..."))
    return re.fullmatch(pattern, printed.strip(), re.DOTALL) is not None


class Reader:
    """A new user in an empty folder, doing what the README says."""

    def __init__(self, folder: Path, url: str | None) -> None:
        self.folder = folder
        self.env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(folder), "COLUMNS": "120"}
        if url is not None:
            self.env["DUE_DATABASE_URL"] = url
        self.running: list[tuple[Step, subprocess.Popen[bytes], Path]] = []

    def follow(self, step: Step) -> None:
        where = f"README line {step.line}: {step.text.splitlines()[0]}"
        if step.kind == "file":
            (self.folder / step.name).write_text(step.text)
        elif step.kind == "python":
            script = self.folder / f"readme_line_{step.line}.py"
            script.write_text(step.text)
            done = subprocess.run([sys.executable, str(script)], **self._options())
            self._check(done, where, expected=step.expected)
        elif step.kind == "command":
            args = [self._value(arg, before) for arg, before in _with_previous(step.text)]
            if args[0] in RUNS_UNTIL_STOPPED and "--help" not in args:
                assert not step.expected, f"{where}: its output cannot be compared"
                self._start(step, args)
            else:
                command = [sys.executable, "-m", "due", *args]
                done = subprocess.run(command, **self._options())
                self._check(done, where, step.expected, REPORTS_STATE.get(args[0], (0,)))

    def stop_all(self) -> None:
        for _, process, _ in self.running:
            process.send_signal(signal.SIGTERM)
        for step, process, log in self.running:
            try:
                code = process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                pytest.fail(f"README line {step.line} ignored SIGTERM:\n{log.read_text()}")
            assert code == 0, f"README line {step.line} exited {code}:\n{log.read_text()}"

    def kill_all(self) -> None:
        for _, process, _ in self.running:
            if process.poll() is None:
                process.kill()

    def _options(self) -> dict[str, object]:
        return {
            "cwd": self.folder,
            "env": self.env,
            "capture_output": True,
            "text": True,
            "timeout": 120,
        }

    @staticmethod
    def _check(
        done: subprocess.CompletedProcess[str],
        where: str,
        expected: tuple[str, ...] = (),
        codes: tuple[int, ...] = (0,),
    ) -> None:
        assert done.returncode in codes, f"{where}\n{done.stdout}\n{done.stderr}"
        if expected:
            assert shown(expected, done.stdout), (
                f"{where}\nthe README shows:\n" + "\n".join(expected) + f"\nit printed:\n"
                f"{done.stdout}\n{done.stderr}"
            )

    def _start(self, step: Step, args: list[str]) -> None:
        log = self.folder / f"readme_line_{step.line}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "due", *args],
                cwd=self.folder,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.running.append((step, process, log))
        started = RUNS_UNTIL_STOPPED[args[0]]
        wait_until(
            lambda: started in log.read_text() or process.poll() is not None,
            timeout=60,
            what=f"README line {step.line} to start",
        )
        assert process.poll() is None, f"README line {step.line}:\n{log.read_text()}"

    @staticmethod
    def _value(arg: str, before: str) -> str:
        if before == "--port":
            # The README's port, as the user would pick a free one: the store's
            # two runs of this test may overlap (pytest -n), and a port held by
            # any other process must not fail the README.
            return str(free_port())
        return arg


def _with_previous(command: str) -> list[tuple[str, str]]:
    """The arguments after `due`, each with the one before it."""
    args = shlex.split(command, comments=True)[1:]
    return list(zip(args, ["", *args[:-1]], strict=True))


def test_the_readme_is_read_as_written() -> None:
    steps = readme_steps(README.read_text())
    assert [s.name for s in steps if s.kind == "file"] == ["myapp.py"]
    commands = [s.text for s in steps if s.kind == "command"]
    assert "due worker --app myapp:app -q emails=16 -q reports=2" in commands
    compared = [s for s in steps if s.expected]
    assert {s.kind for s in compared} == {"python", "command"}, "the outputs shown are compared"
    (enqueue,) = [s for s in compared if s.kind == "python"]
    assert enqueue.expected == ("succeeded {'month': '2026-11'}",)


def test_the_readmes_worker_serves_every_queue_its_example_uses(tmp_path: Path) -> None:
    """The Quickstart's worker must run the jobs of its tasks and schedules: a
    schedule in a queue it did not serve never ran (issue 36)."""
    steps = readme_steps(README.read_text())
    (app_file,) = [s for s in steps if s.kind == "file"]
    (tmp_path / app_file.name).write_text(app_file.text)
    code = (
        "import json, myapp\n"
        "queues = {t.config.queue for t in myapp.app.tasks}\n"
        "queues |= {s.queue for s in myapp.app.defined_schedules.values()}\n"
        "print(json.dumps(sorted(queues)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    (worker,) = [s.text for s in steps if s.text.startswith("due worker")]
    args = shlex.split(worker)
    served = {args[i + 1].split("=")[0] for i, arg in enumerate(args) if arg == "-q"}
    assert set(json.loads(done.stdout)) <= served, (worker, done.stdout)


def test_every_fragment_names_what_exists() -> None:
    """What the README shows but the test cannot run: a Python fragment
    compiles, `pip install` names extras the package has (and the project's own
    repository), `make` (in a fragment, or inline) names targets the Makefile
    has."""
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    targets = set(re.findall(r"^([a-z-]+):", (REPOSITORY / "Makefile").read_text(), re.M))
    fragments = [s for s in readme_steps(README.read_text()) if s.kind == "fragment"]
    assert fragments
    for step in fragments:
        where = f"README line {step.line}: {step.text}"
        if step.name == "python":
            compile(step.text, where, "exec")
            continue
        args = shlex.split(step.text)
        if args[:2] == ["pip", "install"]:
            for target in args[2:]:
                named = re.fullmatch(r"(?:due|\.)\[([\w,-]+)\](?: @ git\+(\S+))?", target)
                assert named, where
                assert set(named.group(1).split(",")) <= extras, where
                assert named.group(2) in (None, project["urls"]["Homepage"]), where
        else:
            assert args[0] == "make" and set(args[1:]) <= targets, where
    for command in re.findall(r"`make ([a-z-]+)[^`]*`", README.read_text()):
        assert command in targets, f"README: make {command}"


def test_every_link_of_the_readme_resolves() -> None:
    for target in LINK.findall(README.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        assert (REPOSITORY / target).exists(), target


@pytest.mark.timeout(240)  # twenty commands, each a new process: ~10 s alone, 4x that under load
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_new_user_follows_the_readme(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = None if store == "sqlite" else str(request.getfixturevalue("postgres_url"))
    reader = Reader(tmp_path, url)
    try:
        for step in readme_steps(README.read_text()):
            reader.follow(step)
        reader.stop_all()
    finally:
        reader.kill_all()
    if store == "sqlite":
        assert (tmp_path / "due.db").exists()  # the default the README promises
