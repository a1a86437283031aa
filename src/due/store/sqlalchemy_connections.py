"""A caller's SQLAlchemy connection or session, lent to due for one call.

`enqueue(connection=...)`, `aenqueue`, `get`, `ctx.checkpoint(connection=...)`
and `ctx.transaction(connection)` take SQLAlchemy's `Connection` and `Session`
(sync) and `AsyncConnection` and `AsyncSession` (async) as well as a driver's
own connection. due's statements then run through SQLAlchemy itself
(`Connection.exec_driver_sql`), inside the caller's transaction:

- SQLAlchemy begins the transaction as it would for the caller's own
  statement (its "autobegin"), whatever the driver does about BEGIN (asyncpg
  has no implicit transaction; psycopg and sqlite3 have), so the job is
  written if and only if the caller commits;
- the statements are SQLAlchemy's: its events and logging (`echo=True`) see
  them, and no second connection or extra round trip is needed;
- an async connection runs the same sync code through SQLAlchemy's own
  bridge (`run_sync`), as SQLAlchemy runs its ORM on an async session.

SQLAlchemy is imported only when the caller hands one of its objects: due
does not depend on it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from due.errors import ConfigurationError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

T = TypeVar("T")

DRIVERS = {
    "postgresql": ("psycopg", "asyncpg"),
    "sqlite": ("pysqlite", "aiosqlite"),
}
"""The SQLAlchemy drivers due runs its statements on, by dialect: psycopg (3,
sync or async) and asyncpg on PostgreSQL; the standard library's sqlite3 and
aiosqlite on SQLite."""

SYNC_TYPES = ("Connection", "Session", "scoped_session")
ASYNC_TYPES = ("AsyncConnection", "AsyncSession", "async_scoped_session")

_checked: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""Engines already found on the App's database, with that database (a check
made once per engine, not per call)."""


def is_sqlalchemy(connection: Any) -> bool:
    """Whether `connection` is one of SQLAlchemy's objects, or of a class made from
    one (SQLModel's Session, Flask-SQLAlchemy's, `sessionmaker(class_=...)`):
    without importing SQLAlchemy."""
    return _sqlalchemy_kind(type(connection)) != ""


def is_async(connection: Any) -> bool:
    """Whether it is SQLAlchemy's AsyncConnection or AsyncSession (or made from one)."""
    return _sqlalchemy_kind(type(connection)) in ASYNC_TYPES


def _sqlalchemy_kind(cls: type[Any]) -> str:
    """The name of the SQLAlchemy class `cls` is or derives from: the first of
    the kinds due takes, else the first of SQLAlchemy's (an `Engine`, named in
    the refusal); "" for a class that owes nothing to SQLAlchemy."""
    kind = _kinds.get(cls)
    if kind is None:
        theirs = [b.__name__ for b in cls.__mro__ if b.__module__.startswith("sqlalchemy.")]
        taken = [name for name in theirs if name in SYNC_TYPES or name in ASYNC_TYPES]
        kind = _kinds[cls] = (taken or theirs or [""])[0]
    return kind


_kinds: weakref.WeakKeyDictionary[type[Any], str] = weakref.WeakKeyDictionary()
"""_sqlalchemy_kind's answers, by class (asked at every call with a connection)."""


def sync_connection(given: Any, call: str) -> Connection:
    """The `Connection` under a sync `Connection` or `Session`, in a transaction.

    A Session's connection is its transaction's (`Session.connection()`
    begins it). A Connection not yet in a transaction begins one, as its next
    statement would: the caller's `commit()` then commits the job with the
    rest, and a connection closed without one rolls it back.
    """
    kind = _sqlalchemy_kind(type(given)) or type(given).__name__
    if kind in ASYNC_TYPES:
        raise ConfigurationError(
            f"{call} got SQLAlchemy's {kind}: use the async call in async code "
            "(await task.aenqueue(..., connection=...), await ctx.checkpoint(...))"
        )
    if kind not in SYNC_TYPES:
        raise ConfigurationError(
            f"{call} takes a SQLAlchemy Connection or Session (an open one, whose "
            f"transaction the job joins), got {kind}"
        )
    connection: Connection = given.connection() if kind != "Connection" else given
    if not connection.in_transaction():
        connection.begin()
    return connection


async def run_sync(given: Any, call: str, work: Callable[[Any], T]) -> T:
    """`work(sync_connection)` on an AsyncConnection or AsyncSession, through
    SQLAlchemy's own bridge from async to sync (`run_sync`)."""
    kind = _sqlalchemy_kind(type(given)) or type(given).__name__
    if kind not in ASYNC_TYPES:
        raise ConfigurationError(
            f"{call} takes SQLAlchemy's AsyncConnection or AsyncSession in async code, got "
            f"{kind}: call the sync form (task.enqueue(..., connection=...)) with it"
        )
    if kind == "async_scoped_session":  # a proxy without run_sync: its task's session
        given = given()
    result: T = await given.run_sync(work)
    return result


def check_database(
    connection: Connection,
    dialect: str,
    call: str,
    *,
    theirs: Callable[[Connection], str],
    ours: str,
    shown: str,
) -> None:
    """Refuse a connection to another kind of database, through a driver due
    does not run on, or to another database than the App's.

    The database is the one the connection is on, as the database says
    (`theirs(connection)`, one statement), against the App's (`ours`): not
    the URLs, which may name it differently (a pooler's alias, defaults
    from the environment). Asked once per engine and App database.
    """
    engine = connection.engine
    if _checked.get(engine) == ours:
        return
    name, driver = connection.dialect.name, connection.dialect.driver
    url = engine.url.render_as_string(hide_password=True)
    if name != dialect:
        raise ConfigurationError(
            f"{call} got a SQLAlchemy connection to {name} ({url}), but this App's "
            f"database is {dialect}: pass a connection of the App's own database"
        )
    if driver not in DRIVERS[dialect]:
        wanted = " or ".join(f"{dialect}+{each}://" for each in DRIVERS[dialect])
        raise ConfigurationError(
            f"{call} got a SQLAlchemy connection through the {driver} driver, which due "
            f"does not run on: make the engine with {wanted}"
        )
    if theirs(connection) != ours:
        raise ConfigurationError(
            f"{call} got a SQLAlchemy connection to {url}, another database than this "
            f"App's ({shown}): the job would be written where no worker of this App "
            "looks; pass a connection of the App's database"
        )
    _checked[engine] = ours


def in_autocommit(given: Any, call: str) -> bool:
    """Whether a caller's connection (SQLAlchemy's, or a driver's) commits each
    statement on its own: it has no transaction for a job to join."""
    driver = given
    if is_sqlalchemy(given):
        driver = sync_connection(given, call).connection.dbapi_connection
    if getattr(driver, "autocommit", False) is True:  # psycopg, asyncpg's, sqlite3 (3.12)
        return True
    sqlite = "sqlite" in type(driver).__module__.lower()  # sqlite3, and aiosqlite's
    # sqlite3 without isolation_level begins nothing itself, but a BEGIN sent
    # for it (SQLAlchemy's recipe for savepoints on pysqlite) opens a transaction.
    return (
        sqlite
        and getattr(driver, "isolation_level", "") is None
        and not getattr(driver, "in_transaction", False)
    )
