"""docs/howto/django.md, followed as written in a new folder: the project made
by its commands, its files written from its blocks, its commands run and its
`manage.py shell` session compared with the output it shows.

The documentation harness (tests/docs) runs on the oldest Python, without
Django, so the page marks its blocks as fragments there; they run here, on
the newest Python, with Django.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import django
import pytest

from tests.docs.normalise import matches
from tests.docs.pages import OUTPUT_LANGUAGES, Block, console_commands, read_page
from tests.helpers.fresh_install import built_wheel, fresh_environment
from tests.helpers.waiting import wait_until
from tests.helpers.workers import REPOSITORY

PAGE = REPOSITORY / "docs" / "howto" / "django.md"
DJANGO_S_TASK = "from django.tasks import task"
DUE_S_TASK = "from due.contrib.django import task"
"""On Django 6.0, whose @task takes no other options, the page says to import
due's decorator instead."""
INSTALLED_ALREADY = "pip install"
"""The test's environment is the page's first command, done (in a fresh one,
by tests/helpers/fresh_install.py)."""
LONG_RUNNING = "manage.py due_worker"
"""Runs until stopped: started in the background, stopped with SIGTERM at the end."""


class Reader:
    """Follows the page in `folder`, with a virtual environment's `python` and
    `due` first on PATH (the tests' own, on the newest Python, by default)."""

    def __init__(self, folder: Path, python: Path = Path(sys.executable)) -> None:
        self.folder = folder
        self.python = python
        self.env = dict(os.environ)
        self.env["PATH"] = f"{python.parent}{os.pathsep}{self.env['PATH']}"
        for name in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "PYTEST_XDIST_WORKER"):
            self.env.pop(name, None)
        self.background: list[subprocess.Popen[str]] = []
        self.session: list[str] = []
        self.session_output: list[str] = []
        self.ran: list[str] = []

    def follow(self, blocks: list[Block]) -> None:
        previous: Block | None = None
        for block in blocks:
            if block.language in OUTPUT_LANGUAGES and previous and previous.language == "python":
                if previous.file_header is None:
                    self.session_output += block.lines
                continue
            if block.language != "python" or block.file_header is not None:
                self.run_session()
            if block.language == "console":
                for command in console_commands(block):
                    self.command(command.text, command.output, block)
            elif block.language == "python" and block.file_header is not None:
                self.write(block)
            elif block.language == "python":
                self.session += block.lines
            previous = block
        self.run_session()

    def write(self, block: Block) -> None:
        header = block.file_header
        assert header is not None
        path = self.folder / header["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "\n".join(block.lines[1:]) + "\n"
        if django.VERSION < (6, 1):  # as the page says to do on Django 6.0
            body = body.replace(DJANGO_S_TASK, DUE_S_TASK)
        if header["continued"]:
            assert path.exists(), f"{block.where}: continues {path.name}, which no step made"
            path.write_text(path.read_text() + "\n" + body)
        else:
            path.write_text(body)

    def command(self, text: str, output: tuple[str, ...], block: Block) -> None:
        if text.startswith(INSTALLED_ALREADY):
            return
        self.ran.append(text)
        if LONG_RUNNING in text:
            self.background.append(
                subprocess.Popen(
                    shlex.split(text),
                    cwd=self.folder,
                    env=self.env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
            return
        done = subprocess.run(
            text, shell=True, cwd=self.folder, env=self.env, capture_output=True, text=True
        )
        shown = (done.stdout + done.stderr).splitlines()
        assert done.returncode == 0, f"{block.where}: `{text}` exited {done.returncode}:\n" + (
            "\n".join(shown)
        )
        if output:
            assert matches(list(output), shown), f"{block.where}: `{text}` printed\n" + "\n".join(
                shown
            )

    def run_session(self) -> None:
        """The python blocks read so far, in one `python manage.py shell`."""
        if not self.session:
            return
        script = "\n".join(self.session) + "\n"
        done = subprocess.run(
            [str(self.python), "manage.py", "shell", "--no-imports", "-c", script],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        printed = done.stdout.splitlines()
        assert done.returncode == 0, done.stdout + done.stderr
        assert matches(self.session_output, printed), "\n".join(printed)
        self.session, self.session_output = [], []

    def stop(self) -> None:
        for process in self.background:
            process.send_signal(signal.SIGTERM)
            out, _ = process.communicate(timeout=30)
            assert process.returncode == 0, out


def test_the_django_page_runs_as_written(tmp_path: Path) -> None:
    follow_the_page(tmp_path, Path(sys.executable))


@pytest.mark.fresh_install
@pytest.mark.timeout(900)  # a new environment's install, then the page
def test_the_django_page_runs_with_only_what_it_says_to_install(tmp_path: Path) -> None:
    page = read_page(PAGE, shown_as=PAGE.relative_to(REPOSITORY))
    wheel = built_wheel(tmp_path / "wheel")
    python = fresh_environment(tmp_path / "venv", page, wheel)
    folder = tmp_path / "reader"
    folder.mkdir()
    follow_the_page(folder, python)


def follow_the_page(tmp_path: Path, python: Path) -> None:
    page = read_page(PAGE, shown_as=PAGE.relative_to(REPOSITORY))
    assert not page.problems, page.problems
    reader = Reader(tmp_path, python)
    try:
        reader.follow(page.blocks)
    finally:
        reader.stop()
    assert any("due_worker" in command for command in reader.ran)
    assert "manage.py due_check" in " ".join(reader.ran)
    # The settings' schedule, added after the worker started, is synced by the
    # next worker as it starts.
    restarted = Reader(tmp_path, python)
    restarted.command("python manage.py due_worker", (), page.blocks[0])
    try:
        wait_until(
            lambda: "morning-digest" in schedules(tmp_path, restarted.env, python),
            timeout=60,
            what="the DUE setting's schedule in the database",
        )
    finally:
        restarted.stop()


def schedules(folder: Path, env: dict[str, str], python: Path) -> str:
    """`due --django mysite.settings schedules`, as the page says any due command runs."""
    listed = subprocess.run(
        [str(python.with_name("due")), "--django", "mysite.settings", "schedules"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0, listed.stderr
    return listed.stdout
