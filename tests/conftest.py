"""Fixtures shared by every test: real stores on both backends, a fake clock.

`backend_url` yields a fresh database for each test: a SQLite file in the
test's temporary folder, or a PostgreSQL schema of its own (selected through
`search_path` in the URL), dropped afterwards. Tests that take `app` or
`store` run once per backend.

That server and database are shared with every other test run on the machine:
a test acts only on what it made (its schema, its sessions, found by an
application name of its own, a database of its own). A test that restarts a
server or ends sessions it did not open takes `private_postgres`, a cluster
of its own (tests/helpers/private_postgres.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

import due
from due.clock import FakeClock
from tests.helpers import private_postgres as private
from tests.helpers.pgbouncer import PgBouncer
from tests.helpers.tools import need
from tests.helpers.workers import Workers

# The Django tests need Django, which needs Python 3.12 or newer: scripts/test-django
# runs them on the newest Python (`make test` calls it).
collect_ignore = [] if importlib.util.find_spec("django") else ["contrib_django"]

POSTGRES_BASE_URL = os.environ.get("DUE_TEST_POSTGRES_URL", "postgresql://127.0.0.1:5432/due_test")
BACKENDS = ["sqlite", "postgres"]
BACKENDS_AND_POOLER = [*BACKENDS, "pgbouncer"]
"""For the tests that matter behind a transaction-mode pooler: a module takes
them with `backend = backend_fixture(BACKENDS_AND_POOLER)`."""
START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def postgres_schema_url(schema: str, base: str = POSTGRES_BASE_URL) -> str:
    separator = "&" if "?" in base else "?"
    return f"{base}{separator}options={quote(f'-csearch_path={schema}')}"


@contextlib.contextmanager
def made_schema() -> Iterator[str]:
    """A PostgreSQL schema of its own, dropped at the end."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def made_database() -> Iterator[str]:
    """A PostgreSQL database of its own on the shared server (its URL), dropped at
    the end: for what is per database, not per schema (advisory locks, the
    public schema, pg_stat_database), which every other test run shares in
    due_test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield POSTGRES_BASE_URL.split("?")[0].rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def postgres_schema() -> Iterator[str]:
    """A PostgreSQL schema made for this test (dropped afterwards)."""
    with made_schema() as schema:
        yield schema


@pytest.fixture
def postgres_url(postgres_schema: str) -> str:
    """A PostgreSQL URL whose tables live in a schema made for this test."""
    return postgres_schema_url(postgres_schema)


@pytest.fixture
def pgbouncer_url(postgres_schema: str, tmp_path: Path) -> Iterator[str]:
    """The test's schema through a real PgBouncer in transaction mode (started for
    this test; its server connections set the schema as they open), with
    due_pooler=transaction: what a user behind such a pooler configures."""
    need("pgbouncer")
    database = POSTGRES_BASE_URL.rsplit("/", 1)[1].split("?")[0]
    with PgBouncer.start(
        tmp_dir=tmp_path / "pgbouncer", database=database, search_path=postgres_schema
    ) as bouncer:
        yield bouncer.url(due_pooler="transaction")


@pytest.fixture
def private_postgres() -> Iterator[private.PrivatePostgres]:
    """A PostgreSQL cluster of this test's own (initdb, a free port), removed
    after: for a test that restarts the server or ends every session."""
    if (missing := private.missing()) is not None:
        pytest.skip(missing)
    with private.private_cluster() as server:
        yield server


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'due.db'}"


def backend_fixture(backends: list[str]) -> Any:
    @pytest.fixture(params=backends)
    def backend(request: pytest.FixtureRequest) -> str:
        return str(request.param)

    return backend


backend = backend_fixture(BACKENDS)


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
def workers(backend_url: str, tmp_path: Path) -> Iterator[Workers]:
    """Real worker processes on the test's database, killed at the end."""
    pool = Workers(backend_url, tmp_path / "ledger.txt", tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture
def store(app: due.App) -> due.App:
    return app.store  # type: ignore[return-value]
