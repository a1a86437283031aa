"""The machine's tools some tests drive (Debian's faketime, promtool, Chromium,
PgBouncer): found, or the tests that need one skip with one line that says
which tool and how to get it.

`make test` installs them (scripts/ensure-*) when it runs as root; without root
it says once per tool that it could not, and the rest of the suite runs.
DUE_TEST_HIDE_TOOLS="faketime promtool" makes these tools missing for the
tests and for scripts/ensure-* alike: what a machine without them sees.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass

import pytest

HIDE_VARIABLE = "DUE_TEST_HIDE_TOOLS"


@dataclass(frozen=True)
class Tool:
    name: str
    """Its command, looked for on PATH."""
    package: str
    """Debian's package that brings it."""
    also_at: tuple[str, ...] = ()
    """Where else its command may be (off a user's PATH: /usr/sbin)."""
    library: tuple[str, ...] = ()
    """Glob patterns of a file it needs besides its command (one must match)."""

    def found(self) -> bool:
        command = shutil.which(self.name) is not None or any(
            os.access(path, os.X_OK) for path in self.also_at
        )
        library = not self.library or any(glob.glob(pattern) for pattern in self.library)
        return command and library


TOOLS = {
    tool.name: tool
    for tool in (
        Tool(
            "faketime",
            "faketime",
            library=("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib*/faketime/libfaketime.so.1"),
        ),
        Tool("promtool", "prometheus"),
        Tool("chromium", "chromium", also_at=("/usr/bin/chromium",)),
        Tool("pgbouncer", "pgbouncer", also_at=("/usr/sbin/pgbouncer",)),
    )
}


def hidden() -> set[str]:
    return set(os.environ.get(HIDE_VARIABLE, "").replace(",", " ").split())


def found(name: str) -> bool:
    """Whether the tool is on this machine, and not hidden."""
    return name not in hidden() and TOOLS[name].found()


def missing_line(name: str) -> str:
    tool = TOOLS[name]
    return (
        f"{name} is missing: the tests that need it are SKIPPED (make test installs it "
        f"as root, scripts/ensure-{name}; or `sudo apt-get install {tool.package}`)"
    )


def need(name: str) -> None:
    """Skip the calling test unless the tool is there."""
    if not found(name):
        pytest.skip(missing_line(name))
