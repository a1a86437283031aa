"""Fixtures shared by every test: real stores on both backends, a fake clock.

`backend_url` yields a fresh database for each test: a SQLite file in the
test's temporary folder, or a PostgreSQL schema of its own (selected through
`search_path` in the URL), dropped afterwards. Tests that take `app` or
`store` run once per backend.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

import due
from due.clock import FakeClock

POSTGRES_BASE_URL = os.environ.get("DUE_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/due_test")
BACKENDS = ["sqlite", "postgres"]
START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def postgres_schema_url(schema: str) -> str:
    separator = "&" if "?" in POSTGRES_BASE_URL else "?"
    return f"{POSTGRES_BASE_URL}{separator}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL URL whose tables live in a schema made for this test."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield postgres_schema_url(schema)
    finally:
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'due.db'}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend_url(backend: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{backend}_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(backend_url: str, clock: FakeClock) -> Iterator[due.App]:
    """A migrated app on a fresh database, with a fake clock."""
    application = due.App(backend_url, clock=clock)
    application.migrate()
    yield application
    application.close()


@pytest.fixture
def store(app: due.App) -> due.App:
    return app.store  # type: ignore[return-value]
