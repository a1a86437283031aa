"""due's statements on a caller's SQLAlchemy connection to PostgreSQL
(sqlalchemy_connections.py): through `Connection.exec_driver_sql`, on psycopg
(sync or async) or asyncpg.

The statements are written for psycopg (`%(name)s`, binary arrays as
`%(name)b`); for asyncpg, whose placeholders are `$1, $2...`, each is
rewritten once, its parameters sent in that order. Times come back in UTC
(the caller's session may be in any time zone) and JSON decoded, as on
due's own connections.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from due.errors import StoreUnavailableError
from due.store.all_or_none import SAVEPOINT, AllOrNone, kept_all_or_none
from due.store.backend import Batch, Rows, ValueRefused, Values
from due.store.postgres.backend import (
    _batch_params,
    _columns,
    redact,
    refusal,
    translate_errors,
)
from due.store.sqlalchemy_connections import in_autocommit

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, CursorResult

OWN_TRANSACTION = AllOrNone(("BEGIN",), "COMMIT", ("ROLLBACK",))

_PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]|%%")


class SQLAlchemyTransaction:
    """A `Transaction` on a caller's SQLAlchemy connection, inside its transaction."""

    locks_rows = True

    def __init__(self, connection: Connection, now: datetime | None, queries: Mapping[str, str]):
        self.connection = connection
        self._now = now
        self._instant = now
        self._queries = queries
        self._numbered = connection.dialect.paramstyle == "numeric_dollar"  # asyncpg

    @property
    def now(self) -> datetime | None:
        return self._now

    def instant(self) -> datetime:
        if self._instant is None:
            self._instant = self.run("current_time", {"now": None})[0]["now"]
        return self._instant

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> Rows:
        result = self._execute(query, params or {})
        if not result.returns_rows:
            return []
        return [_utc(dict(row)) for row in result.mappings()]

    def run_values(self, query: str, params: Mapping[str, Any] | None = None) -> Values:
        result = self._execute(query, params or {})
        if not result.returns_rows:
            return (), []
        names = tuple(result.keys())
        rows = [tuple(_value_read(value) for value in row) for row in result]
        return names, rows

    def run_each(self, query: str, rows: Batch, params: Mapping[str, Any] | None = None) -> Rows:
        return self.run(query, {**(params or {}), **_columns(rows)})

    def run_many(
        self,
        query: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
        params: Mapping[str, Any],
    ) -> int:
        return sum(
            self._execute(query, batch).rowcount for batch in _batch_params(columns, rows, params)
        )

    def _execute(self, query: str, params: Mapping[str, Any]) -> CursorResult[Any]:
        if self._numbered:
            statement, names = _numbered(self._queries[query])
            values = tuple(_value_sent(params[name]) for name in names)
            return self.connection.exec_driver_sql(statement, values)
        return self.connection.exec_driver_sql(
            self._queries[query], {name: _jsonb(value) for name, value in params.items()}
        )


@contextlib.contextmanager
def on_sqlalchemy(
    connection: Connection, url: str, now: datetime | None, queries: Mapping[str, str], atomic: bool
) -> Iterator[SQLAlchemyTransaction]:
    """The transaction on `connection`; `atomic`: kept all or none (a savepoint)."""
    import sqlalchemy.exc

    tx = SQLAlchemyTransaction(connection, now, queries)
    with translated(url):
        if not atomic:
            yield tx
            return
        # In the caller's transaction, a savepoint; in autocommit (there is
        # none), a transaction of their own.
        statements = OWN_TRANSACTION if in_autocommit(connection, "") else SAVEPOINT
        execute = connection.exec_driver_sql
        with kept_all_or_none(execute, statements, sqlalchemy.exc.DBAPIError):
            yield tx


@contextlib.contextmanager
def translated(url: str) -> Iterator[None]:
    """SQLAlchemy's errors become due's, as the driver's own would (the driver's
    error is the cause, SQLAlchemy's its context)."""
    import sqlalchemy.exc

    try:
        yield
    except sqlalchemy.exc.DBAPIError as error:
        original = error.orig
        if error.connection_invalidated:  # the connection is gone, whatever the driver
            raise StoreUnavailableError(
                f"{redact(url)}: your connection was lost ({original}): nothing of this "
                "call was kept"
            ) from error
        if isinstance(original, psycopg.Error):
            with translate_errors(url, callers=True):
                raise original from error
        state = getattr(original, "sqlstate", None)  # asyncpg's, through SQLAlchemy
        if (
            state is None
            and isinstance(original, Exception)
            and "DataError" in type(original).__name__
        ):  # a value asyncpg could not send: nothing written
            raise ValueRefused(f"{redact(url)}: a value could not be sent: {original}") from error
        raise refusal(url, state, original or error, callers=True) from error


@functools.lru_cache(maxsize=256)
def _numbered(statement: str) -> tuple[str, tuple[str, ...]]:
    """A psycopg statement with `$1, $2...` for its named placeholders, and the
    names in their order (a name used twice is one parameter)."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        name = match[1]
        if name is None:
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(numbered, statement), tuple(names)


def _jsonb(value: Any) -> Any:
    return Jsonb(value) if isinstance(value, dict) else value


def _value_sent(value: Any) -> Any:
    """A parameter as asyncpg takes it: a mapping (a jsonb value) as JSON text."""
    return json.dumps(value) if isinstance(value, dict) else value


def _value_read(value: Any) -> Any:
    # (Only claims read values, never on a caller's connection: JSON is left
    # as the driver decoded it.)
    return value.astimezone(UTC) if isinstance(value, datetime) else value


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    for name, value in row.items():
        if isinstance(value, datetime):
            row[name] = value.astimezone(UTC)
    return row
