"""The README is a contract: every snippet and every `due` command it shows runs.

The README is followed from top to bottom as a new user would, in an empty
folder, on both stores: a Python block that starts with `# name.py` is saved
as that file; any other Python block is run as a script; every `due ...` line
of a shell block and every inline `due ...` is run and must succeed. A command
that runs until stopped (`due worker`, `due scheduler`) is started, must
report that it started, keeps running for the steps after it (a snippet
waits for a job it runs), and must exit 0 on SIGTERM at the end.

Placeholders stand for what a user would take from an earlier output: `ID` a
job's id (a delayed job to show or cancel, a cancelled one to retry, a
parent of pieces after --group or --parent), `NAME` a schedule's name.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
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
INLINE_COMMAND = re.compile(r"(?<!`)`(due [^`]+)`")


@dataclass(frozen=True)
class Step:
    kind: str  # "file", "python" or "command"
    text: str
    line: int
    name: str = ""


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
        indent, language = fence.groups()
        start = index + 1
        index = start
        while not FENCE.match(lines[index]):
            index += 1
        body = [line.removeprefix(indent) for line in lines[start:index]]
        index += 1
        steps.extend(_block_steps(language, body, start + 1))
    return steps


def _block_steps(language: str, body: list[str], line: int) -> Iterator[Step]:
    if language == "python":
        first = body[0].strip()
        if re.fullmatch(r"# \w+\.py", first):
            yield Step("file", "\n".join(body[1:]) + "\n", line, first[2:])
        else:
            yield Step("python", "\n".join(body) + "\n", line)
    elif language == "sh":
        for offset, command in enumerate(body):
            if command.strip() and not command.strip().startswith("#"):
                assert command.startswith("due "), f"README line {line + offset}: {command}"
                yield Step("command", command, line + offset)
    else:
        assert not [b for b in body if b.startswith("due ")], f"README line {line}: use ```sh"


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
            self._check(subprocess.run([sys.executable, str(script)], **self._options()), where)
        else:
            args = self._substituted(shlex.split(step.text, comments=True)[1:])
            if args[0] in RUNS_UNTIL_STOPPED and "--help" not in args:
                self._start(step, args)
            else:
                command = [sys.executable, "-m", "due", *args]
                done = subprocess.run(command, **self._options())
                self._check(done, where, REPORTS_STATE.get(args[0], (0,)))

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
        done: subprocess.CompletedProcess[str], where: str, codes: tuple[int, ...] = (0,)
    ) -> None:
        assert done.returncode in codes, f"{where}\n{done.stdout}\n{done.stderr}"

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

    def _substituted(self, args: list[str]) -> list[str]:
        return [self._value(arg, args[0], args[i - 1] if i else "") for i, arg in enumerate(args)]

    def _value(self, arg: str, command: str, before: str) -> str:
        if arg == "ID":
            return self._job_for(command, before)
        if before == "--port":
            # The README's port, as the user would pick a free one: the store's
            # two runs of this test may overlap (pytest -n), and a port held by
            # any other process must not fail the README.
            return str(free_port())
        if arg == "NAME":
            return self._helper(
                "if 'readme' not in [s.stored.name for s in app.schedules()]:",
                "    app.add_schedule('readme', every='1h', task=send_reset_email, args=[0])",
                "print('readme')",
            )
        return arg

    def _job_for(self, command: str, option: str) -> str:
        if option in ("--group", "--parent"):
            return self._helper("print(app.batch(send_reset_email, [(1,), (2,)]).id)")
        job = "job = send_reset_email.options(delay='1h').enqueue(0)"
        if command == "retry":
            return self._helper(job, "app.cancel(job.id)", "print(job.id)")
        return self._helper(job, "print(job.id)")

    def _helper(self, *lines: str) -> str:
        """What an earlier output would have told the user (a job's id, say)."""
        code = "\n".join(["from myapp import app, send_reset_email", *lines])
        done = subprocess.run([sys.executable, "-c", code], **self._options())
        self._check(done, f"preparing a placeholder: {code}")
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def test_the_readme_is_read_as_written() -> None:
    steps = readme_steps(README.read_text())
    assert [s.name for s in steps if s.kind == "file"] == ["myapp.py"]
    assert len([s for s in steps if s.kind == "python"]) >= 5
    commands = [s.text for s in steps if s.kind == "command"]
    assert len(commands) >= 30
    assert "due worker --app myapp:app -q emails=16 -q reports=2" in commands


@pytest.mark.timeout(360)  # seventy commands, each a new process: ~30 s alone, 4x that under load
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
