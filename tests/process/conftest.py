"""Fixtures of the process tests: the ledger app's tasks on the test's database
(real worker processes come from the shared `workers` fixture)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import due
from tests.apps import ledger_app
from tests.helpers.workers import app_with_tasks_of


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    """The ledger app's tasks, on this test's database, with the real clock."""
    application = app_with_tasks_of(backend_url, ledger_app.app)
    yield application
    application.close()
