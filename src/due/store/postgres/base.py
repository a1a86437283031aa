"""PostgreSQL plumbing shared by the store's parts: the pool, cursors, errors, schema.

The store is one class (`store.PostgresStore`) assembled from mixins, one
concern each: jobs (`store.py`), workers (`workers.py`), schedules and leases
(`schedules.py`); every statement they run is in `queries.sql`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import random
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Self, TypeVar

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from due.clock import Clock
from due.errors import (
    ConfigurationError,
    StoreConflictError,
    StoreError,
    StoreUnavailableError,
)
from due.store import pieces
from due.store.postgres.own_connection import OwnConnection
from due.store.protocol import ChangeFeed
from due.store.sql import load_migrations, load_queries, require_current_schema

QUERIES = load_queries("due.store.postgres")
MIGRATIONS = load_migrations("due.store.postgres")
LATEST_VERSION = MIGRATIONS[-1].version
NOTIFY_CHANNEL = "due_jobs"
ENDED_CHANNEL = "due_ended"


class PostgresBase:
    single_writer = False

    def __init__(
        self,
        url: str,
        clock: Clock,
        *,
        pool_size: int = 10,
        connect_timeout: float = 5.0,
    ) -> None:
        self.url = url
        self._clock = clock
        self._connect_timeout = connect_timeout
        self._pool_size = pool_size
        self._handler_pool: psycopg_pool.ConnectionPool | None = None
        self._handler_pool_lock = threading.Lock()
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, **keepalive_options(url)},
            configure=_configure_pooled_connection,
            timeout=connect_timeout,
            open=False,
            name="due",
        )
        self._pool.open(wait=False)
        self._own = OwnConnection(self._connect_own, clock.monotonic)
        _close_at_exit(self)

    # --- plumbing -----------------------------------------------------------

    def _now(self) -> datetime | None:
        return self._clock.now()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """An idle autocommit connection: the store's own if no other thread
        holds it, else one from the pool (so threads never wait for each other)."""
        with self._own.borrow() as own:
            if own is not None:
                yield own
                return
        with self._pool.connection() as conn:
            yield conn

    def _connect_own(self) -> psycopg.Connection[Any]:
        options: dict[str, Any] = {"autocommit": True, **keepalive_options(self.url)}
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(self.url):
            # libpq counts whole seconds, 2 at least
            options["connect_timeout"] = max(2, round(self._connect_timeout))
        conn = psycopg.connect(self.url, **options)
        _configure_pooled_connection(conn)
        return conn

    @contextlib.contextmanager
    def _cursor(self, transaction: bool = False) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        with translate_errors(self.url), self._connection() as conn:
            if transaction:
                with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                    yield cur
            else:
                with conn.cursor(row_factory=dict_row) as cur:
                    yield cur

    def _all(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        with self._cursor() as cur:
            cur.execute(QUERIES[name], params)
            return cur.fetchall() if returns_rows(cur) else []

    def _fetch_now(self, cur: psycopg.Cursor[dict[str, Any]]) -> datetime:
        """A concrete now for a transaction: the injected clock's, or the database's."""
        cur.execute(QUERIES["current_time"], {"now": self._now()})
        row = cur.fetchone()
        assert row is not None
        return utc(row["now"])

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._own.close()
        self._pool.close()
        if self._handler_pool is not None:
            self._handler_pool.close()

    def handler_pool(self) -> psycopg_pool.ConnectionPool:
        """Connections for handlers' own transactions (`ctx.transaction()`): a pool
        apart, so a handler holding one for a while never starves the worker's
        heartbeats and acknowledgements, and without the idle-in-transaction
        limit, since the handler's code runs between its statements."""
        with self._handler_pool_lock:
            if self._handler_pool is None:
                self._handler_pool = psycopg_pool.ConnectionPool(
                    self.url,
                    min_size=0,
                    max_size=self._pool_size,
                    kwargs=keepalive_options(self.url),
                    configure=_configure_handler_connection,
                    timeout=self._connect_timeout,
                    open=False,
                    name="due-handlers",
                )
                self._handler_pool.open()
            return self._handler_pool

    def _settle(self, cur: psycopg.Cursor[dict[str, Any]], ended: list[dict[str, Any]]) -> None:
        """Count jobs that ended on their parents (and settle those), in the
        caller's transaction; nothing to do for jobs without parent or pieces."""
        if any(pieces.concerns_a_parent(row) for row in ended):
            pieces.settle(piece_queries(cur), ended, self._fetch_now(cur))

    # --- schema ---------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied_now = []
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["unbounded_transaction"])  # a migration may take long
            cur.execute(QUERIES["lock_migrations"])
            cur.execute(QUERIES["create_migrations_table"])
            cur.execute(QUERIES["schema_version"])
            current = cur.fetchone()["version"] or 0  # type: ignore[index]
            if current > LATEST_VERSION:
                require_current_schema(current, LATEST_VERSION, self._where())
            for migration in MIGRATIONS:
                if migration.version > current:
                    cur.execute(migration.sql.encode())
                    cur.execute(
                        QUERIES["record_migration"],
                        {"version": migration.version, "name": migration.name},
                    )
                    applied_now.append(migration.version)
        return applied_now

    def schema_version(self) -> int | None:
        with self._cursor() as cur:
            cur.execute(QUERIES["migrations_table_exists"])
            if not cur.fetchone()["present"]:  # type: ignore[index]
                return None
            cur.execute(QUERIES["schema_version"])
            version = cur.fetchone()["version"]  # type: ignore[index]
            return int(version) if version is not None else None

    def check_schema(self) -> None:
        require_current_schema(self.schema_version(), LATEST_VERSION, self._where())

    def _where(self) -> str:
        return f"PostgreSQL database {redact(self.url)}"

    def now(self) -> datetime:
        """The current instant on the store's clock."""
        rows = self._all("current_time", {"now": self._now()})
        return utc(rows[0]["now"])

    # --- for the worker (wake-ups) --------------------------------------------------

    def listen_connection(self, channel: str = NOTIFY_CHANNEL) -> psycopg.Connection[Any]:
        """A dedicated autocommit connection (outside the pool) for LISTEN."""
        with translate_errors(self.url):
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=5, **keepalive_options(self.url)
            )
            conn.execute(f"LISTEN {channel}")
            return conn

    def watch_endings(self) -> ChangeFeed:
        return NotificationFeed(self, ENDED_CHANNEL)


class NotificationFeed:
    """Waits for a notification on one channel, on a connection of its own.

    A connection that is new (or renewed after a failure) counts as a change:
    what happened before it listened was not heard, so the caller looks again.
    """

    def __init__(self, store: PostgresBase, channel: str) -> None:
        self._store = store
        self._channel = channel
        self._conn: psycopg.Connection[Any] | None = None

    def wait(self, timeout: float) -> bool:
        if self._conn is None:
            self._conn = self._store.listen_connection(self._channel)
            return True
        try:
            heard = any(True for _ in self._conn.notifies(timeout=timeout, stop_after=1))
            if heard:
                for _ in self._conn.notifies(timeout=0):
                    pass  # those that came together are one change
            return heard
        except psycopg.Error as error:
            self.close()
            raise StoreUnavailableError(f"{redact(self._store.url)}: {error}") from error

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_OPEN_STORES: weakref.WeakSet[PostgresBase] = weakref.WeakSet()


def _close_at_exit(store: PostgresBase) -> None:
    """Close the pools when the interpreter exits, if nobody did.

    A pool left open is otherwise closed by its finalizer during interpreter
    shutdown, when its threads can no longer run: on Python 3.13 each one then
    waits 5 s ("couldn't stop thread ... within 5.0 seconds"), so a script that
    forgot `app.close()` took 20 s to exit. (A weak set: this keeps no store alive.)
    """
    _OPEN_STORES.add(store)


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN_STORES):
        store.close()


KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
"""TCP settings of every connection due opens. A connection whose path froze (a
partition, a peer gone without a word) blocks its caller in a read that never
returns; with these the kernel gives up within about ten seconds (keepalive
probes unanswered: 5 + 3 x 2 s; data sent and never acknowledged: 10 s), the
call fails, and the connection is replaced. A worker's trust in its leases
does not wait for that: it ends on the monotonic clock (worker/heartbeat.py)."""


def keepalive_options(url: str) -> dict[str, Any]:
    """KEEPALIVES, except those the URL sets itself."""
    given = psycopg.conninfo.conninfo_to_dict(url)
    return {name: value for name, value in KEEPALIVES.items() if name not in given}


STATEMENT_TIMEOUT = "60s"
LOCK_TIMEOUT = "30s"
"""Server-side bounds on due's own statements, which take milliseconds: a
statement still running after a minute, or waiting on a lock for half of one,
is stuck (a lock held by a paused process, say), and ends with an error that
the caller retries, rather than hold a worker's thread for ever. Lifted for
migrations and for bulk work the user asked for (`unbounded_transaction`)."""

IDLE_IN_TRANSACTION_LIMIT = "10s"
"""due's own transactions last milliseconds. One left open longer belongs to a
process that was paused (SIGSTOP, a frozen VM) in the middle of it, and holds
row locks that would stall every other worker (rescue, acknowledgements,
failover) until it wakes up: the server ends such a session instead, rolling
its transaction back. Not set on the connection of `ctx.transaction()`, where
the handler's own code runs between statements."""


def _configure_connection(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET TIME ZONE 'UTC'")


def _configure_handler_connection(conn: psycopg.Connection[Any]) -> None:
    _configure_connection(conn)
    conn.commit()  # handed out idle; the handler's transaction starts afresh


def returns_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether the last statement returned rows (even none): unlike
    `cur.description`, this builds no column objects, a measurable cost of a
    one-row statement such as a single enqueue."""
    result = cur.pgresult
    return result is not None and result.nfields > 0


def _configure_pooled_connection(conn: psycopg.Connection[Any]) -> None:
    _configure_connection(conn)
    conn.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_LIMIT}'")
    conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
    conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")


def piece_queries(cur: psycopg.Cursor[dict[str, Any]]) -> pieces.Execute:
    """Named queries run in the cursor's transaction, for due.store.pieces."""

    def execute(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        cur.execute(QUERIES[name], params)
        return cur.fetchall() if returns_rows(cur) else []

    return execute


def utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def normalise(row: dict[str, Any]) -> dict[str, Any]:
    for name, value in row.items():
        if isinstance(value, datetime):
            row[name] = value.astimezone(UTC)
    return row


def normalise_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [normalise(row) for row in rows]


def redact(url: str) -> str:
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparseable URL)"
    host = info.get("host", "localhost")
    return f"{info.get('dbname', '')!s} on {host}:{info.get('port', 5432)}"


@contextlib.contextmanager
def translate_errors(url: str) -> Iterator[None]:
    """Driver errors become StoreErrors, with the original as the cause."""
    try:
        yield
    except psycopg_pool.PoolClosed as error:
        raise StoreUnavailableError(
            f"{redact(url)}: this app's store was closed (app.close()); use an open App"
        ) from error
    except psycopg_pool.PoolTimeout as error:
        raise StoreUnavailableError(
            f"could not get a connection to {redact(url)} in time: {error}"
        ) from error
    except psycopg.Error as error:
        if _rolled_back(error):
            raise StoreConflictError(
                f"{redact(url)}: this transaction was rolled back ({error.sqlstate}: "
                f"{str(error).strip()}); nothing was written, and trying again is safe"
            ) from error
        if isinstance(error, psycopg.OperationalError):
            raise StoreUnavailableError(f"{redact(url)} is unreachable: {error}") from error
        raise StoreError(f"{redact(url)}: {error}") from error


ROLLED_BACK_STATES = ("25P03", "57P01")
"""Besides class 40 (deadlock, serialization failure): a session ended for idling
in a transaction, or by an administrator."""


def _rolled_back(error: psycopg.Error) -> bool:
    state = error.sqlstate or ""
    return state.startswith("40") or state in ROLLED_BACK_STATES


CONFLICT_RETRIES = 5
F = TypeVar("F", bound=Callable[..., Any])


def retried_on_conflict(method: F) -> F:
    """Run a store method's transaction again when the database rolled it back
    for a concurrent one (a deadlock between settling pieces and cancelling
    their parent, say): the usual remedy, and safe, since nothing was written."""

    @functools.wraps(method)
    def again(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(CONFLICT_RETRIES):
            try:
                return method(*args, **kwargs)
            except StoreConflictError:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                # Jittered, so the two transactions do not meet again.
                time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
        raise AssertionError("unreachable")

    return again  # type: ignore[return-value]


@contextlib.asynccontextmanager
async def atranslate_errors(url: str) -> AsyncIterator[None]:
    with translate_errors(url):
        yield


def require_sync_connection(connection: Any, call: str) -> None:
    """A caller's own connection must be a sync psycopg one (for `call`)."""
    if isinstance(connection, psycopg.AsyncConnection):
        raise ConfigurationError(
            f"{call} got an async psycopg connection: use the async call "
            "(await task.aenqueue(...), await ctx.checkpoint(...)) in async code"
        )
    if not isinstance(connection, psycopg.Connection):
        raise ConfigurationError(
            f"{call} takes a psycopg.Connection for a PostgreSQL app, "
            f"got {type(connection).__name__}"
        )


def require_async_connection(connection: Any, call: str) -> None:
    if not isinstance(connection, psycopg.AsyncConnection):
        raise ConfigurationError(
            f"{call} takes a psycopg.AsyncConnection for a PostgreSQL app, "
            f"got {type(connection).__name__}"
        )
