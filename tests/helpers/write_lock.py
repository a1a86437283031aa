"""The database's write lock held by another session, so that a write of due's
waits while a test makes a crowd behind it."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg

from due.store.sqlite.backend import path_from_url


class WriteLock:
    """PostgreSQL: a table lock on due_jobs in SHARE mode (inserts wait for it);
    SQLite: another connection's BEGIN IMMEDIATE."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        if backend == "postgres":
            self.postgres: psycopg.Connection[Any] = psycopg.connect(url, autocommit=True)
        else:
            self.sqlite = sqlite3.connect(path_from_url(url), isolation_level=None)

    def run(self, sql: str) -> None:
        """A statement of the test's own (a constraint, a trigger): committed,
        or, while the lock is taken, in the lock's transaction."""
        (self.postgres if self.backend == "postgres" else self.sqlite).execute(sql)

    def take(self) -> None:
        if self.backend == "postgres":
            self.postgres.autocommit = False
            self.postgres.execute("LOCK TABLE due_jobs IN SHARE MODE")
        else:
            self.sqlite.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        """Roll back what was done under the lock."""
        if self.backend == "postgres":
            self.postgres.rollback()
        else:
            self.sqlite.execute("ROLLBACK")

    def commit(self) -> None:
        """Commit what was done under the lock."""
        if self.backend == "postgres":
            self.postgres.commit()
        else:
            self.sqlite.execute("COMMIT")

    def close(self) -> None:
        (self.postgres if self.backend == "postgres" else self.sqlite).close()
