"""Fixtures of the process tests: the ledger app's tasks, and real worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import due
from tests.apps import ledger_app
from tests.helpers.workers import Workers


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    """The ledger app's tasks, on this test's database, with the real clock."""
    application = due.App(backend_url)
    application.migrate()
    for task in ledger_app.app.tasks:
        application.tasks.add(due.Task(application, task.fn, task.name, task.config))
    yield application
    application.close()


@pytest.fixture
def workers(backend_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(backend_url, tmp_path / "ledger.txt", tmp_path)
    yield pool
    pool.stop_all()
