"""A reader's first try of a how-to page: a new virtual environment with exactly
what the page's install step says, and nothing of the project's own.

The project's `.venv` has every extra and every dev tool, so a page run there
passes even when its install line leaves out a package it uses (three pages
did). Here `due` itself comes from a wheel built from this checkout (no
release is on PyPI), installed by the page's own command with its extras;
the other packages come from the package index, as they would for the reader.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.docs.pages import Page, console_commands
from tests.helpers.workers import REPOSITORY

INSTALL_SECONDS = 600
"""A fresh environment's pip install, on a loaded machine (usually 10 to 30 s)."""
DUE_REQUIREMENT = re.compile(r"^due(\[[\w,-]+\])?$")


def built_wheel(folder: Path) -> Path:
    """This checkout as a wheel (built from a copy of its source, as a release is)."""
    source = folder / "source"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPOSITORY / name, source / name)
    shutil.copytree(REPOSITORY / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    wheels = folder / "wheels"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--wheel-dir", str(wheels), str(source)),
        ],
        check=True,
        capture_output=True,
        timeout=INSTALL_SECONDS,
    )
    (wheel,) = wheels.glob("due-*.whl")
    return wheel


def install_step(page: Page) -> list[list[str]]:
    """The arguments of each `pip install` of the page's first block that has any."""
    for block in page.blocks:
        if block.language != "console":
            continue
        installs = [
            shlex.split(command.text)[2:]
            for command in console_commands(block)
            if command.text.startswith("pip install ")
        ]
        if installs:
            return installs
    raise AssertionError(f"{page.path}: no `pip install` for a reader to follow")


def fresh_environment(folder: Path, page: Page, wheel: Path) -> Path:
    """A new virtual environment (on the interpreter running the tests) with the
    page's install step done; its `python`."""
    subprocess.run(
        [Path(sys.base_prefix) / "bin" / "python3", "-m", "venv", str(folder)],
        check=True,
        capture_output=True,
        timeout=INSTALL_SECONDS,
    )
    python = folder / "bin" / "python"
    for arguments in install_step(page):
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *map(from_wheel(wheel), arguments)],
            capture_output=True,
            text=True,
            timeout=INSTALL_SECONDS,
        )
        assert done.returncode == 0, f"{page.path}: pip install {arguments}:\n{done.stderr}"
    return python


def from_wheel(wheel: Path) -> Callable[[str], str]:
    """`due[extras]` as the reader writes it, from this checkout's wheel."""

    def requirement(argument: str) -> str:
        matched = DUE_REQUIREMENT.match(argument)
        if matched is None:
            return argument
        return f"due{matched[1] or ''} @ {wheel.as_uri()}"

    return requirement
