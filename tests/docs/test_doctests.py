"""The examples in the public API's docstrings run, as doctests.

Each public module's examples run in a temporary directory (they create their
SQLite files there), with no database URL in the environment.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PUBLIC_MODULES = [
    "due",
    "due.app",
    "due.clock",
    "due.core.jobs",
    "due.core.records",
    "due.core.schedules",
    "due.errors",
    "due.long_work.context",
    "due.request",
    "due.retry",
    "due.task",
    "due.testing",
    "due.visibility.alerts",
]
WITH_EXAMPLES = {"due.clock", "due.request", "due.retry", "due.testing"}
"""Modules known to hold examples: a doctest that stops being found fails."""


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_the_docstring_examples_run(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DUE_DATABASE_URL", raising=False)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (above)"
    if name in WITH_EXAMPLES:
        assert result.attempted > 0, f"no docstring example found in {name}"
