"""A plain connection to a test's database, outside due, for the test's own tables."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from due.store.postgres.pooler import PoolerSettings
from due.store.sqlite.backend import path_from_url


@contextlib.contextmanager
def plain_transaction(url: str) -> Iterator[Any]:
    """A connection in a transaction that commits when the block exits cleanly."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(path_from_url(url))
        try:
            with conn:
                yield conn
        finally:
            conn.close()
    else:
        # What a user's own code does behind a transaction pooler: no prepared
        # statements, and due's parameters are due's (libpq refuses them).
        settings = PoolerSettings.from_url(url)
        with psycopg.connect(settings.url, **settings.connect_options()) as pg:  # type: ignore[arg-type]
            yield pg


def rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with plain_transaction(url) as conn:
        return [tuple(row) for row in conn.execute(query).fetchall()]


def table_rows(url: str, query: str) -> list[tuple[Any, ...]] | None:
    """`rows`, or None when the table does not exist."""
    try:
        return rows(url, query)
    except (sqlite3.OperationalError, psycopg.errors.UndefinedTable):
        return None


MIN_NAME_LENGTH = 8
"""An application name shorter is no test's own (a random part is 8 characters)."""


def cut_sessions(admin_url: str, application_name: str) -> int:
    """End, from the server, every session of that application name (what a
    restart or a failover does to them); returns how many were ended, once
    they are gone (pg_terminate_backend only signals them: until each has
    exited and sent its client the FATAL message, an idle one looks alive).

    The server is shared with every other test run on the machine: the name
    must be one the test made for itself (with a random part), never empty
    (every session that sets none: other runs' too)."""
    if len(application_name) < MIN_NAME_LENGTH:
        raise ValueError(
            f"cut_sessions needs an application name of the test's own, with a random "
            f"part (e.g. f'due-test-{{uuid.uuid4().hex[:8]}}'), not {application_name!r}: "
            "the server's other sessions are other test runs'"
        )
    query = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()"
    )
    with psycopg.connect(admin_url, autocommit=True) as admin:
        pids = [pid for (pid,) in admin.execute(query, (application_name,)).fetchall()]
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchone()
            if not alive or not alive[0]:
                break
            time.sleep(0.01)
    return len(pids)
