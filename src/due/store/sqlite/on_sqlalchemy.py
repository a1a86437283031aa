"""due's statements on a caller's SQLAlchemy connection to SQLite
(sqlalchemy_connections.py): through `Connection.exec_driver_sql`, on sqlite3
(pysqlite) or aiosqlite.

SQLite's transaction (sqlite_backend.SQLiteTransaction) is written for a
DB-API cursor; here its cursor is SQLAlchemy's connection, which sends each
statement as it is (SQLite's own `:name` and `?1` placeholders) and gives
the raw rows back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from due.errors import StoreError
from due.store.all_or_none import kept_all_or_none

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, CursorResult


class StatementsThrough:
    """A DB-API cursor's face on a SQLAlchemy connection (what SQLiteTransaction uses)."""

    row_factory: Any = None  # rows are tuples, as SQLAlchemy gives them

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._result: CursorResult[Any] | None = None

    def cursor(self) -> StatementsThrough:
        return self

    def execute(self, statement: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> None:
        self._result = self._connection.exec_driver_sql(statement, params or None)

    def executemany(self, statement: str, rows: Iterable[Sequence[Any]]) -> None:
        self._result = self._connection.exec_driver_sql(statement, [tuple(row) for row in rows])

    @property
    def description(self) -> tuple[tuple[str], ...] | None:
        if self._result is None or not self._result.returns_rows:
            return None
        return tuple((name,) for name in self._result.keys())  # noqa: SIM118 (a Result)

    def fetchall(self) -> list[tuple[Any, ...]]:
        assert self._result is not None
        return [tuple(row) for row in self._result]

    @property
    def rowcount(self) -> int:
        return -1 if self._result is None else self._result.rowcount


def sqlite_file(connection: Connection) -> str:
    """The file of the connection's main SQLite database, as the database says
    it ("" for an in-memory one)."""
    for _, name, file in connection.exec_driver_sql("PRAGMA database_list"):
        if name == "main":
            return os.path.realpath(file) if file else ""
    return ""


@contextlib.contextmanager
def kept_on_sqlalchemy(connection: Connection, atomic: bool) -> Iterator[StatementsThrough]:
    """The statements' cursor; `atomic`: kept all or none. sqlite3 begins the
    caller's transaction only before an INSERT, UPDATE or DELETE: a savepoint
    sent first would open (and its release commit) a transaction of its own,
    so the caller's is begun as sqlite3 would begin it (sqlite_backend's
    `_all_or_none`)."""
    import sqlalchemy.exc

    from due.store.sqlite.backend import _all_or_none

    through = StatementsThrough(connection)
    if not atomic:
        yield through
        return
    statements = _all_or_none(connection.connection.driver_connection)  # type: ignore[arg-type]
    with kept_all_or_none(connection.exec_driver_sql, statements, sqlalchemy.exc.DBAPIError):
        yield through


@contextlib.contextmanager
def translated(path: str) -> Iterator[None]:
    """SQLAlchemy's errors become due's as sqlite3's own would."""
    import sqlite3

    import sqlalchemy.exc

    from due.store.sqlite.backend import translate_errors

    try:
        yield
    except sqlalchemy.exc.DBAPIError as error:
        original = error.orig
        if "no such table: due_" in str(original):
            raise StoreError(
                f"SQLite database {path}: your connection's database has no due tables "
                f"({original}): pass a connection to this App's database file, migrated "
                "(due migrate)"
            ) from error
        if isinstance(original, sqlite3.Error):
            with translate_errors(path):
                raise original from error
        raise StoreError(f"SQLite database {path}: {original or error}") from error
