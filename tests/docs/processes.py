"""The processes a page starts: commands left running in the background (a
second terminal), and the Python session that runs its ```python blocks."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tests.docs.pages import Block, Command

HERE = Path(__file__).resolve().parent
SESSION_SCRIPT = HERE / "python_session.py"
COMMAND_SECONDS = 60.0
"""How long one command, one Python block or one wait may take (a loaded CI
machine included) before the page fails."""


class PageFailure(AssertionError):
    pass


@dataclass
class Background:
    """A command left running, as in a second terminal."""

    command: Command
    process: subprocess.Popen[bytes]
    log: Path
    seen: int = 0
    """Lines of its output already matched by the page."""

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def stop(self) -> int:
        """Ctrl-C, as a terminal sends it (to its whole process group)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout=COMMAND_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            raise PageFailure(
                f"{self.command.line}: `{self.command.text}` ignored Ctrl-C for "
                f"{COMMAND_SECONDS:.0f}s:\n{self.log.read_text()}"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class PythonSession:
    """The page's Python blocks' interpreter (python_session.py), in the page's folder."""

    def __init__(self, process: subprocess.Popen[str], replies: TextIO, log: Path) -> None:
        self.process = process
        self.replies = replies
        self.log = log

    @classmethod
    def start(cls, folder: Path, env: dict[str, str], python: Path) -> PythonSession:
        read, write = os.pipe()
        log = folder / ".python-session.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                [str(python), str(SESSION_SCRIPT)],
                cwd=folder,
                env={**env, "DUE_DOCS_RESULT_FD": str(write)},
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(write,),
                text=True,
            )
        os.close(write)
        return cls(process, os.fdopen(read), log)

    def run(self, block: Block, code: str, rewritten: list[str]) -> dict[str, Any]:
        assert self.process.stdin is not None
        request = {"code": code, "page": str(block.page), "line": block.line}
        self.process.stdin.write(json.dumps({**request, "rewritten": rewritten}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.replies], [], [], COMMAND_SECONDS)
        line = self.replies.readline() if ready else ""
        if not line:
            raise PageFailure(
                f"{block.where}: no reply within {COMMAND_SECONDS:.0f}s, or the session "
                f"ended:\n{self.log_text()}"
            )
        reply: dict[str, Any] = json.loads(line)
        return reply

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=COMMAND_SECONDS)
        except subprocess.TimeoutExpired:
            raise PageFailure(f"the Python session did not end:\n{self.log_text()}") from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.replies.close()
