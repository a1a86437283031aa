"""PostgreSQL under the store: many hosts, one database, psycopg 3 with a pool.

Claims use `FOR UPDATE SKIP LOCKED` on a partial index of queued rows;
batches (heartbeats, acknowledgements) are one statement each, their fields
sent as binary arrays (`unnest`); every statement that makes a job claimable
sends a NOTIFY in the same transaction, so it is delivered exactly when the
job becomes visible. Connections: a pool, plus one connection the store keeps
for itself and uses whenever no other thread does (a pool checkout costs
about a fifth of a one-row insert), one async connection in each event loop
that enqueues (loop_connections.py), a pool apart for handlers' own
transactions, and dedicated connections for LISTEN. Every connection has TCP
keepalives and a TCP user timeout; due's own sessions bound their statements,
lock waits and idle transactions.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import re
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from due.clock import Clock
from due.errors import (
    ConfigurationError,
    StoreConflictError,
    StoreError,
    StoreUnavailableError,
)
from due.store.all_or_none import SAVEPOINT, kept_all_or_none
from due.store.backend import (
    Batch,
    ChangeFeed,
    Columns,
    DuplicateError,
    LockWaitTimeout,
    Rows,
    StatementRefused,
    Transaction,
    ValueRefused,
    Values,
)
from due.store.postgres.arrays import ADAPTERS
from due.store.postgres.callers import callers_async_cursor, callers_cursor
from due.store.postgres.conninfo import check_readable
from due.store.postgres.loop_connections import LoopConnections
from due.store.postgres.own_connection import OwnConnection, live_connection
from due.store.postgres.pooler import HINT, PollingFeed, PoolerSettings, is_pooler_breakage
from due.store.postgres.woken_apart import insert_woken_apart, insert_woken_apart_async
from due.store.sql import load_migrations, load_queries, require_current_schema
from due.store.sqlalchemy_connections import check_database, is_sqlalchemy, sync_connection

if TYPE_CHECKING:
    from due.store.postgres.loop_lane import LoopLane

NOTIFY_CHANNEL = "due_jobs"
ENDED_CHANNEL = "due_ended"


def channel_sql(base: str) -> str:
    """SQL naming the channel `base` of the schema that holds `due_jobs` for the
    statement (`{channel:base}` in queries.sql). NOTIFY reaches every listener
    of the database: with the schema in the name, deployments in two schemas
    of one database no longer wake each other. The public schema keeps the bare
    name. Another is hashed: a channel name holds 63 bytes, a schema name as
    many. The table's schema, not the session's first one: a caller's own
    connection may search other schemas before due's.

    This subquery costs the server about 6 us per statement, a visible share of
    a single enqueue's: once a store has checked its schema, its own sessions
    name the channels with literals instead (`with_channel_names`). The
    subquery remains for `channel_names`, for a store used before that check,
    and on callers' connections (`enqueue(connection=...)`), which may find
    `due_jobs` in another schema than the store's."""
    return (
        f"(SELECT '{base}' || coalesce('.' || left(encode(sha256(convert_to("
        "nullif(nspname, 'public'), 'UTF8')), 'hex'), 16), '') FROM pg_namespace "
        "WHERE oid = (SELECT relnamespace FROM pg_class WHERE oid = 'due_jobs'::regclass))"
    )


CHANNEL_NAME = re.compile(r"(due_jobs|due_ended)(\.[0-9a-f]{16})?")
"""What `channel_sql` yields: nothing that needs quoting in a literal."""


def _with_channels(text: str, names: Mapping[str, str]) -> str:
    for base in (NOTIFY_CHANNEL, ENDED_CHANNEL):
        text = text.replace(f"{{channel:{base}}}", names[base])
    if "{channel:" in text:
        raise RuntimeError(f"queries.sql names an unknown channel: {text[:200]}")
    return text


def with_channel_names(names: Mapping[str, str]) -> dict[str, str]:
    """The statements with each channel named by a literal: `names` maps each
    base name to its name in the store's schema (from `channel_names`)."""
    for name in names.values():
        if not CHANNEL_NAME.fullmatch(name):
            raise StoreError(f"unexpected notification channel name {name!r}")
    literals = {base: f"'{name}'" for base, name in names.items()}
    return {name: _with_channels(text, literals) for name, text in _RAW_QUERIES.items()}


T = TypeVar("T")

_RAW_QUERIES = load_queries("due.store.postgres")
_SUBQUERIES = {base: channel_sql(base) for base in (NOTIFY_CHANNEL, ENDED_CHANNEL)}
QUERIES = {name: _with_channels(text, _SUBQUERIES) for name, text in _RAW_QUERIES.items()}
"""The statements, each channel named by its subquery (see `channel_sql`)."""
MIGRATIONS = load_migrations("due.store.postgres")
LATEST_VERSION = MIGRATIONS[-1].version
MANY_BATCH = 125
"""Rows per statement of `run_many`: the statements are pipelined, so the server
inserts one batch while the client makes the next (a bulk enqueue prepares its
jobs as they are sent), where one COPY had the server write everything at its
end (bench/NOTES.md: 3 to 5 % more jobs a second, 1,000 a call). Without
pipeline mode (a libpq older than 14) the statements go one after another."""


class PostgresBackend:
    single_writer = False
    locks_rows = True
    leaves_dead_rows = True
    counting_statements = True

    def __init__(
        self,
        url: str,
        clock: Clock,
        *,
        pool_size: int = 10,
        connect_timeout: float = 5.0,
        pooler: str | None = None,
        listen_url: str | None = None,
    ) -> None:
        self.settings = PoolerSettings.from_url(url, pooler, listen_url)
        self.url = url = self.settings.url
        check_readable(url)
        if self.settings.listen_url is not None:
            check_readable(self.settings.listen_url, "listen URL")
        self._connect = {**keepalive_options(url), **self.settings.connect_options()}
        self._clock = clock
        self._connect_timeout = connect_timeout
        self._pool_size = pool_size
        self._handler_pool: psycopg_pool.ConnectionPool | None = None
        self._handler_pool_lock = threading.Lock()
        self._channel_names: dict[str, str] | None = None
        self._queries: Mapping[str, str] = QUERIES
        """The statements as this store sends them (channels named by literals
        once known)."""
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs=self._own_connect(),
            configure=self._configure,
            timeout=connect_timeout,
            open=False,
            name="due",
        )
        self._pool.open(wait=False)
        self._own = OwnConnection(self._connect_own, clock.monotonic)
        self._loop_connections = LoopConnections(self._connect_loop, clock.monotonic)
        _OPEN_BACKENDS.add(self)

    # --- transactions -------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(
        self,
        *,
        read: bool = False,
        single: bool = False,
        unbounded: bool = False,
        leader: bool = False,
    ) -> Iterator[Transaction]:
        with (
            translate_errors(self.url),
            self._connection() as conn,
            conn.cursor(row_factory=dict_row) as cur,
        ):
            if (read or single) and self.settings.transaction_pooler and not unbounded:
                # Through a transaction-mode pooler due's bounds hold only inside a
                # transaction: the statements run in one, sent with the bounds in a
                # pipeline (one round trip, and one for the COMMIT).
                bounds = self._queries["bound_transaction"], TRANSACTION_BOUNDS
                with pipelined_transaction(conn, cur, *bounds):
                    yield PostgresTransaction(cur, self._clock.now(), self._queries)
                return
            if read or single:  # autocommitted statements: no BEGIN/COMMIT round trips
                if unbounded and not self.settings.transaction_pooler:
                    # A statement that may not run in a transaction block (VACUUM):
                    # the session's bound is lifted for it, and set back after.
                    cur.execute("SET statement_timeout = 0")
                    try:
                        yield PostgresTransaction(cur, self._clock.now(), self._queries)
                    finally:
                        with contextlib.suppress(psycopg.Error):
                            cur.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
                    return
                yield PostgresTransaction(
                    cur, self._clock.now(), self._queries, wake_apart=not read
                )
                return
            with conn.transaction():
                if self.settings.transaction_pooler and not unbounded:
                    cur.execute(self._queries["bound_transaction"], TRANSACTION_BOUNDS)
                if unbounded:
                    cur.execute(self._queries["unbounded_transaction"])
                if leader:
                    cur.execute(self._queries["bound_leader_transaction"])
                yield PostgresTransaction(cur, self._clock.now(), self._queries)

    @contextlib.contextmanager
    def on_connection(
        self, connection: Any, call: str, *, atomic: bool = False
    ) -> Iterator[Transaction]:
        if is_sqlalchemy(connection):
            from due.store.postgres.on_sqlalchemy import on_sqlalchemy  # (it imports this)

            lent = sync_connection(connection, call)
            with on_sqlalchemy(lent, self.url, self._clock.now(), QUERIES, atomic) as lent_tx:
                check_database(
                    lent,
                    "postgresql",
                    call,
                    theirs=lambda _: self._their_identity(lent_tx, lent, call),
                    ours=self._server_identity[0],
                    shown=redact(self.url),
                )
                yield lent_tx
            return
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
        with (
            translate_errors(self.url, callers=True),
            callers_cursor(connection) as cur,
        ):
            # A caller's connection may find `due_jobs` in another schema than the
            # store's: its statements name the channel of the table they write.
            tx = PostgresTransaction(cur, self._clock.now(), QUERIES, to_utc=True)
            if not atomic:
                yield tx
                return
            if connection.autocommit:
                # psycopg reads the session's state under its lock and opens a
                # transaction, or a savepoint in the caller's (another thread's
                # statement may be running on a shared connection).
                with connection.transaction():
                    yield tx
                return
            # Not connection.transaction(), which on an idle connection would
            # BEGIN and COMMIT, ending the transaction the caller means to end:
            # the SAVEPOINT opens it, as the caller's next statement would.
            execute = _after_an_aborted_pipeline(cur.execute, connection)
            with kept_all_or_none(execute, SAVEPOINT, psycopg.Error):
                yield tx

    @functools.cached_property
    def _server_identity(self) -> tuple[str, str | None]:
        """Which database of which server this App's is, and the schema of its
        tables (check_database)."""
        with self.transaction(read=True) as tx:
            (row,) = tx.run("server_identity")
            return _server_identity(row), row["tables"]

    def _their_identity(self, tx: Transaction, connection: Any, call: str) -> str:
        """Which database a caller's SQLAlchemy connection is on; refused here
        when it is the App's but its search_path finds another deployment's
        tables (another schema's due_jobs, which no worker of this App reads).
        One that finds none is let through: its statement says so."""
        (row,) = tx.run("server_identity")
        theirs = _server_identity(row)
        database, tables = self._server_identity
        if theirs == database and row["tables"] not in (None, tables):
            url = connection.engine.url.render_as_string(hide_password=True)
            raise ConfigurationError(
                f"{call} got a SQLAlchemy connection to {url} whose search_path finds "
                f"due's tables in schema {row['tables']}, not this App's ({tables}): the "
                "job would be written where no worker of this App looks; give the "
                f"engine the App's search_path (connect_args={{'options': "
                f"'-csearch_path={tables}'}})"
            )
        return theirs

    @contextlib.asynccontextmanager
    async def on_async_connection(
        self, connection: Any, call: str, *, atomic: bool = False
    ) -> AsyncIterator[AsyncPostgresTransaction]:
        if not isinstance(connection, psycopg.AsyncConnection):
            raise ConfigurationError(
                f"{call} takes a psycopg.AsyncConnection for a PostgreSQL app, "
                f"got {type(connection).__name__}"
            )
        with translate_errors(self.url, callers=True):
            async with callers_async_cursor(connection) as cur:
                tx = AsyncPostgresTransaction(cur, self._clock.now(), QUERIES)  # as on_connection
                if not atomic:
                    yield tx
                    return
                if connection.autocommit:
                    async with connection.transaction():
                        yield tx
                    return
                (start,) = SAVEPOINT.start  # as kept_all_or_none, awaited
                await cur.execute(start)
                try:
                    yield tx
                except BaseException:
                    with contextlib.suppress(psycopg.Error):
                        if connection.pgconn.pipeline_status == psycopg.pq.PipelineStatus.ABORTED:
                            async with connection.pipeline() as pipeline:
                                await pipeline.sync()  # as _after_an_aborted_pipeline
                        for statement in SAVEPOINT.undo:
                            await cur.execute(statement)
                    raise
                await cur.execute(SAVEPOINT.keep)

    @contextlib.asynccontextmanager
    async def loop_statement(self) -> AsyncIterator[AsyncPostgresTransaction | None]:
        """One autocommitted statement from the running event loop, on the
        store's own connection of that loop; None on the loop's first enqueue or
        while another coroutine of the loop has it (the caller takes a thread)."""
        with translate_errors(self.url):
            async with self._loop_connections.borrow() as conn:
                if conn is None:
                    yield None
                    return
                async with conn.cursor(row_factory=dict_row) as cur:
                    now, queries = self._clock.now(), self._queries
                    yield AsyncPostgresTransaction(cur, now, queries, to_utc=False, wake_apart=True)

    @contextlib.contextmanager
    def handler_transaction(self) -> Iterator[tuple[Any, Transaction]]:
        with (
            translate_errors(self.url),
            live_connection(self.handler_pool()) as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            yield conn, PostgresTransaction(cur, self._clock.now(), self._queries)

    def writing_on_this_thread(self) -> bool:
        """False: a handler's transaction holds no lock another enqueue needs (each
        enqueue takes a connection of its own)."""
        return False

    def now(self) -> datetime:
        """The current instant on the store's clock."""
        with self.transaction(read=True) as tx:
            return tx.instant()

    # --- connections -------------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """An idle autocommit connection: the store's own if no other thread
        holds it, else one from the pool (so threads never wait for each other)."""
        with self._own.borrow() as own:
            if own is not None:
                yield own
                return
        with live_connection(self._pool) as conn:
            yield conn

    def _connect_own(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.url, **self._own_options())
        self._configure(conn)
        return conn

    async def _connect_loop(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(self.url, **self._own_options())
        try:
            await conn.execute(self._session_sql())
        except BaseException:  # cancelled meanwhile, say: not left open for the GC
            conn.pgconn.finish()
            raise
        return conn

    def _own_connect(self) -> dict[str, Any]:
        """How every connection of due's own connects (not those lent to handlers)."""
        return {"autocommit": True, "context": ADAPTERS, **self._connect}

    def _own_options(self) -> dict[str, Any]:
        """How the store's own connections (not the pools') connect."""
        options: dict[str, Any] = self._own_connect()
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(self.url):
            # libpq counts whole seconds, 2 at least
            options["connect_timeout"] = max(2, round(self._connect_timeout))
        return options

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(self._session_sql())

    def _session_sql(self) -> str:
        """The session's settings as one string: one round trip (without
        parameters, psycopg sends it as one simple query)."""
        return "; ".join(self._session_settings())

    def _session_settings(self) -> tuple[str, ...]:
        if self.settings.transaction_pooler:
            # The pooler tracks the time zone per client; the bounds would leak to
            # other clients of the server connection: they are set per transaction.
            return (UTC_SESSION,)
        return SESSION_SETTINGS

    def loop_lane(self, connections: int) -> LoopLane:
        """Async connections for the worker's claims and acknowledgements."""
        from due.store.postgres.loop_lane import LoopLane

        # Through a transaction-mode pooler nothing is prepared: each statement is
        # planned anyway, and a session setting would leak to the pooler's other clients.
        pooled = self.settings.transaction_pooler
        lane_settings = () if pooled else LANE_SETTINGS
        return LoopLane(
            self.url,
            self._own_connect(),
            self._session_settings() + lane_settings,
            self._clock.now,
            self.queries,
            self._connect_timeout,
            connections,
            bounds=TRANSACTION_BOUNDS if pooled else None,
        )

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
                    kwargs=self._connect,
                    configure=_configure_handler_connection,
                    timeout=self._connect_timeout,
                    open=False,
                    name="due-handlers",
                )
                self._handler_pool.open()
            return self._handler_pool

    def listen_connection(self, channel: str = NOTIFY_CHANNEL) -> psycopg.Connection[Any]:
        """A dedicated autocommit connection (outside the pool) for LISTEN: to the
        database URL, or to the direct `listen_url` past a transaction pooler."""
        name = self.channel_name(channel)
        url = self.settings.listen_url or self.url
        with translate_errors(url):
            conn = psycopg.connect(
                url, autocommit=True, connect_timeout=5, **keepalive_options(url)
            )
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
            return conn

    def channel_name(self, channel: str) -> str:
        """The channel `channel` of this store's schema, as its statements notify
        it: named on the store's own session, since a listen_url may not carry
        the schema. (Two threads asking at once both ask the database: the same
        names.)"""
        if self._channel_names is None:
            with self.transaction(read=True) as tx:
                (row,) = tx.run("channel_names")
            names = {NOTIFY_CHANNEL: row["jobs"], ENDED_CHANNEL: row["ended"]}
            self._queries = with_channel_names(names)
            self._channel_names = names
        return self._channel_names[channel]

    def queries(self) -> Mapping[str, str]:
        """The statements as this store sends them now."""
        return self._queries

    def watch_endings(self) -> ChangeFeed:
        return self._feed(ENDED_CHANNEL)

    def watch_jobs(self) -> ChangeFeed:
        return self._feed(NOTIFY_CHANNEL)

    def _feed(self, channel: str) -> ChangeFeed:
        if self.settings.transaction_pooler and self.settings.listen_url is None:
            return PollingFeed(self._clock.monotonic)  # LISTEN cannot work through it
        return NotificationFeed(self, channel)

    def close(self) -> None:
        self._own.close()
        self._loop_connections.close()
        self._pool.close()
        if self._handler_pool is not None:
            self._handler_pool.close()

    # --- schema ---------------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied_now = []
        with self.transaction(unbounded=True) as tx:  # a migration may take long
            assert isinstance(tx, PostgresTransaction)
            tx.run("lock_migrations")
            tx.run("create_migrations_table")
            current = tx.run("schema_version")[0]["version"] or 0
            if current > LATEST_VERSION:
                require_current_schema(current, LATEST_VERSION, self._where())
            for migration in MIGRATIONS:
                if migration.version > current:
                    tx.cursor.execute(migration.sql.encode())
                    tx.run(
                        "record_migration", {"version": migration.version, "name": migration.name}
                    )
                    applied_now.append(migration.version)
        return applied_now

    def empty(self) -> None:
        with self.transaction() as tx:
            tx.run("empty_tables")

    def schema_version(self) -> int | None:
        with self.transaction(read=True) as tx:
            if not tx.run("migrations_table_exists")[0]["present"]:
                return None
            version = tx.run("schema_version")[0]["version"]
            return int(version) if version is not None else None

    def check_schema(self) -> None:
        require_current_schema(self.schema_version(), LATEST_VERSION, self._where())
        self.channel_name(NOTIFY_CHANNEL)  # the table is there: the channels can be named

    def _where(self) -> str:
        return f"PostgreSQL database {redact(self.url)}"


class PostgresTransaction:
    locks_rows = True

    def __init__(
        self,
        cursor: psycopg.Cursor[dict[str, Any]],
        now: datetime | None,
        queries: Mapping[str, str],
        to_utc: bool = False,
        *,
        wake_apart: bool = False,
    ) -> None:
        self.cursor = cursor
        self._now = now
        self._queries = queries
        self._instant: datetime | None = now
        self._to_utc = to_utc
        """Put times in UTC: on a caller's connection, whose session may be in any
        time zone (due's own sessions are in UTC: psycopg gives UTC times)."""
        self._wake_apart = wake_apart and psycopg.Pipeline.is_supported()
        """Autocommitted statements on due's own session: a single enqueue's
        wake-up is sent in a transaction of its own (woken_apart.py)."""

    @property
    def now(self) -> datetime | None:
        return self._now

    def instant(self) -> datetime:
        if self._instant is None:
            self._instant = self.run("current_time", {"now": None})[0]["now"].astimezone(UTC)
        return self._instant

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> Rows:
        if query == "insert_job" and self._wake_apart:
            insert_woken_apart(self.cursor, self._queries, _encoded(params or {}))
        else:
            self.cursor.execute(self._queries[query], _encoded(params or {}))
        rows = _rows(self.cursor)
        return [_utc(row) for row in rows] if self._to_utc else rows

    def run_values(self, query: str, params: Mapping[str, Any] | None = None) -> Values:
        with self.cursor.connection.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(self._queries[query], _encoded(params or {}))
            rows = _rows(cursor)
            return _values(cursor, rows, self._to_utc)

    def run_each(self, query: str, rows: Batch, params: Mapping[str, Any] | None = None) -> Rows:
        return self.run(query, {**(params or {}), **_columns(rows)})

    def run_many(
        self,
        query: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
        params: Mapping[str, Any],
    ) -> int:
        statement = self._queries[query]
        connection = self.cursor.connection
        sent = []  # a cursor per statement: each keeps its own row count
        with _pipeline(connection):
            for batch in _batch_params(columns, rows, params):
                sent.append(connection.execute(statement, batch))
        return sum(cursor.rowcount for cursor in sent)


class AsyncPostgresTransaction:
    locks_rows = True

    def __init__(
        self,
        cursor: psycopg.AsyncCursor[dict[str, Any]],
        now: datetime | None,
        queries: Mapping[str, str],
        to_utc: bool = True,
        values_cursor: psycopg.AsyncCursor[tuple[Any, ...]] | None = None,
        *,
        wake_apart: bool = False,
    ) -> None:
        self.cursor = cursor
        self._wake_apart = wake_apart and psycopg.AsyncPipeline.is_supported()
        """As PostgresTransaction's: due's own session of the loop, autocommitted."""
        self._now = now
        self._queries = queries
        self._to_utc = to_utc
        """Put times in UTC (a caller's connection; not one of due's own sessions)."""
        self._values_cursor = values_cursor
        """A cursor of tuples on the same connection, kept by its owner (else one
        is made for each `run_values`)."""

    @property
    def now(self) -> datetime | None:
        return self._now

    async def run(self, query: str, params: Mapping[str, Any] | None = None) -> Rows:
        if query == "insert_job" and self._wake_apart:
            await insert_woken_apart_async(self.cursor, self._queries, _encoded(params or {}))
        else:
            await self.cursor.execute(self._queries[query], _encoded(params or {}))
        rows = await _async_rows(self.cursor)
        return [_utc(row) for row in rows] if self._to_utc else rows

    async def run_values(self, query: str, params: Mapping[str, Any] | None = None) -> Values:
        if self._values_cursor is not None:
            return await self._run_values(self._values_cursor, query, params)
        binary = self.cursor.format == psycopg.pq.Format.BINARY  # as the transaction's
        async with self.cursor.connection.cursor(row_factory=tuple_row, binary=binary) as cursor:
            return await self._run_values(cursor, query, params)

    async def _run_values(
        self,
        cursor: psycopg.AsyncCursor[tuple[Any, ...]],
        query: str,
        params: Mapping[str, Any] | None,
    ) -> Values:
        await cursor.execute(self._queries[query], _encoded(params or {}))
        rows = await _async_rows(cursor)
        return _values(cursor, rows, self._to_utc)

    async def run_each(
        self, query: str, rows: Batch, params: Mapping[str, Any] | None = None
    ) -> Rows:
        return await self.run(query, {**(params or {}), **_columns(rows)})

    async def run_many(
        self,
        query: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
        params: Mapping[str, Any],
    ) -> int:
        statement = self._queries[query]
        connection = self.cursor.connection
        sent = []
        async with _async_pipeline(connection):
            for batch in _batch_params(columns, rows, params):
                sent.append(await connection.execute(statement, batch))
        return sum(cursor.rowcount for cursor in sent)


def _columns(rows: Batch) -> dict[str, list[Any]]:
    """A batch's rows as one array per field, named as the field (`%(id)b`)."""
    if isinstance(rows, Columns):
        return rows
    if not rows:
        return {}
    return {name: [row[name] for row in rows] for name in rows[0]}


def _encoded(params: Mapping[str, Any]) -> Mapping[str, Any]:
    if not any(isinstance(value, dict) for value in params.values()):
        return params  # the common case, untouched
    return {
        name: Jsonb(value) if isinstance(value, dict) else value for name, value in params.items()
    }


def _pipeline(connection: psycopg.Connection[Any]) -> contextlib.AbstractContextManager[Any]:
    if psycopg.Pipeline.is_supported():
        return connection.pipeline()
    return contextlib.nullcontext()


@contextlib.contextmanager
def pipelined_transaction(
    conn: psycopg.Connection[Any],
    cur: psycopg.Cursor[Any],
    bound: str,
    bounds: Mapping[str, Any],
) -> Iterator[None]:
    """BEGIN, the bounds and the statements in a pipeline; the COMMIT after it.

    Not `with conn.pipeline(), conn.transaction()`, which ends the transaction
    inside the pipeline: psycopg follows each Sync with a Flush, and a
    transaction-mode pooler that reads the Flush after the Sync's reply has
    already let the server connection go (PgBouncer 1.18 does, under load)
    lends it again to this client for a message that gets no reply, and keeps
    it lent until the client's next statement: every other client waits. Here
    the pipeline's Sync and Flush come while the transaction is open (the
    server stays this client's), and the COMMIT is sent alone, as one simple
    query whose reply lets the server go.
    """
    try:
        with _pipeline(conn):
            cur.execute("BEGIN")
            cur.execute(bound, bounds)
            yield
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()
        raise
    conn.commit()


@contextlib.asynccontextmanager
async def async_pipelined_transaction(
    conn: psycopg.AsyncConnection[Any],
    cur: psycopg.AsyncCursor[Any],
    bound: str,
    bounds: Mapping[str, Any],
) -> AsyncIterator[None]:
    """`pipelined_transaction` on an async connection."""
    try:
        async with _async_pipeline(conn):
            await cur.execute("BEGIN")
            await cur.execute(bound, bounds)
            yield
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            await conn.rollback()
        raise
    await conn.commit()


def _async_pipeline(
    connection: psycopg.AsyncConnection[Any],
) -> contextlib.AbstractAsyncContextManager[Any]:
    if psycopg.AsyncPipeline.is_supported():
        return connection.pipeline()
    return contextlib.nullcontext()


def _rows(cursor: psycopg.Cursor[T]) -> list[T]:
    """The rows of the statement just sent (none for one that returns none).
    On a caller's connection in pipeline mode its result has not come yet: it
    is asked for as psycopg's own fetch asks, by a flush, not a sync (which
    in autocommit would commit the caller's statements queued before it)."""
    if cursor.pgresult is None and cursor.connection.pgconn.pipeline_status:
        try:
            return cursor.fetchall()
        except psycopg.ProgrammingError as error:
            if error.sqlstate is not None:  # the server's error for the statement
                raise
            return []  # it returns no rows
    return cursor.fetchall() if returns_rows(cursor) else []


async def _async_rows(cursor: psycopg.AsyncCursor[T]) -> list[T]:
    """`_rows` for an async cursor."""
    if cursor.pgresult is None and cursor.connection.pgconn.pipeline_status:
        try:
            return await cursor.fetchall()
        except psycopg.ProgrammingError as error:
            if error.sqlstate is not None:
                raise
            return []
    return await cursor.fetchall() if returns_rows(cursor) else []


def _after_an_aborted_pipeline(
    execute: Callable[[str], object], connection: psycopg.Connection[Any]
) -> Callable[[str], object]:
    """`execute`, but on a caller's connection whose pipeline a failed statement
    aborted, the pipeline is synced first: until then the server skips what it
    is sent, the undoing of a savepoint too."""

    def run(statement: str) -> object:
        if connection.pgconn.pipeline_status == psycopg.pq.PipelineStatus.ABORTED:
            with connection.pipeline() as pipeline:
                pipeline.sync()
        return execute(statement)

    return run


def _batch_params(
    columns: Sequence[str], rows: Iterable[tuple[Any, ...]], params: Mapping[str, Any]
) -> Iterator[dict[str, Any]]:
    """The parameters of each statement of `run_many`: MANY_BATCH rows as one
    list per column, named as the column, beside the shared `params`. Each
    batch is read from `rows` only when the statement before it has gone."""
    rows = iter(rows)
    while batch := list(itertools.islice(rows, MANY_BATCH)):
        yield {**params, **dict(zip(columns, map(list, zip(*batch, strict=True)), strict=True))}


def _values(
    cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any],
    rows: list[tuple[Any, ...]],
    to_utc: bool,
) -> Values:
    # The names from the result itself: `cursor.description` builds an object
    # per column, a tenth of an empty claim's client time.
    result = cursor.pgresult
    fields = range(result.nfields) if result is not None else ()
    names = tuple((result.fname(i) or b"").decode() for i in fields)  # type: ignore[union-attr]
    if to_utc:
        rows = [
            tuple(v.astimezone(UTC) if isinstance(v, datetime) else v for v in row) for row in rows
        ]
    return names, rows


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    for name, value in row.items():
        if isinstance(value, datetime):
            row[name] = value.astimezone(UTC)
    return row


class NotificationFeed:
    """Waits for a notification on one channel, on a connection of its own.

    A connection that is new (or renewed after a failure) counts as a change:
    what happened before it listened was not heard, so the caller looks again.
    """

    def __init__(self, backend: PostgresBackend, channel: str) -> None:
        self._backend = backend
        self._channel = channel
        self._conn: psycopg.Connection[Any] | None = None

    def messages(self, timeout: float) -> list[str]:
        if self._conn is None:
            self._conn = self._backend.listen_connection(self._channel)
            return [""]
        try:
            heard = [note.payload for note in self._conn.notifies(timeout=timeout, stop_after=1)]
            if heard:  # and those that came with it
                heard += [note.payload for note in self._conn.notifies(timeout=0)]
            return heard
        except psycopg.Error as error:
            self.close()
            raise StoreUnavailableError(f"{redact(self._backend.url)}: {error}") from error

    def wait(self, timeout: float) -> bool:
        return bool(self.messages(timeout))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_OPEN_BACKENDS: weakref.WeakSet[PostgresBackend] = weakref.WeakSet()
"""Backends still open, closed at interpreter exit if nobody did: a pool left
open is otherwise closed by its finalizer during shutdown, when its threads can
no longer run, and on Python 3.13 each one then waits 5 s ("couldn't stop
thread ... within 5.0 seconds"): a script that forgot app.close() took 20 s to
exit. (A weak set: this keeps nothing alive.)"""


@atexit.register
def _close_open_backends() -> None:
    for backend in list(_OPEN_BACKENDS):
        backend.close()


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


TRANSACTION_BOUNDS = {
    "statement": STATEMENT_TIMEOUT,
    "lock": LOCK_TIMEOUT,
    "idle": IDLE_IN_TRANSACTION_LIMIT,
}
"""The same bounds, set per transaction where session settings would leak
(through a transaction-mode pooler, whose clients share server sessions)."""


UTC_SESSION = "SET TIME ZONE 'UTC'"
SESSION_SETTINGS = (
    UTC_SESSION,
    f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_LIMIT}'",
    f"SET statement_timeout = '{STATEMENT_TIMEOUT}'",
    f"SET lock_timeout = '{LOCK_TIMEOUT}'",
    # The server compiles a statement it expects to be costly: what due runs
    # costly is a figure read over a big table, where compiling took 0.75 s of
    # the 2.3 s the queue figures took with 10,000,000 jobs queued.
    "SET jit = off",
)
"""How due's own sessions start (through a transaction-mode pooler: only the
time zone; the bounds are set per transaction there)."""


LANE_SETTINGS = (
    # The lane runs two statements, the claim and the acknowledgement, hundreds
    # of times a second. The server kept planning the claim anew each time (its
    # generic plan, costed for an unknown LIMIT, never looked cheaper): 0.6 ms of
    # planning for a claim of 100 jobs, a tenth of the server's time per job.
    "SET plan_cache_mode = force_generic_plan",
    # Every row these statements touch is found through an index (the claim and
    # timer indexes, primary keys). A plan made while the table is small, before
    # autovacuum has analyzed it, would otherwise scan the table (the
    # acknowledgement's did) until the next ANALYZE: scans are costed out.
    "SET enable_seqscan = off",
)
"""What the worker's loop lane sets besides (loop_lane.py)."""


def _configure_handler_connection(conn: psycopg.Connection[Any]) -> None:
    conn.execute(UTC_SESSION)
    conn.commit()  # handed out idle; the handler's transaction starts afresh


def returns_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether the last statement returned rows (even none): unlike
    `cur.description`, this builds no column objects, a measurable cost of a
    one-row statement such as a single enqueue."""
    result = cur.pgresult
    return result is not None and result.nfields > 0


def _server_identity(row: Mapping[str, Any]) -> str:
    return f"{row['database']} on the server started {row['started'].isoformat()}"


def redact(url: str) -> str:
    """The database a message is about, as `dbname on host:port`: never its user
    or password (a whole URL is shown through due.redaction.redact_url)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparseable URL)"
    host = info.get("host", "localhost")
    return f"{info.get('dbname', '')!s} on {host}:{info.get('port', 5432)}"


VALUE_STATE_CLASSES = ("22", "23", "54")
"""SQLSTATE classes of a value the statement carried (a data exception, a
constraint the row broke, a limit such as jsonb's size): the rows' fault
(ValueRefused). Any other refusal — a statement timeout (57014), a full disk
(53100) — is the database's, and says nothing about the rows."""
QUERY_CANCELED = "57014"
ROLLED_BACK_STATES = ("25P03", "57P01")
"""Besides class 40 (deadlock, serialization failure): a session ended for idling
in a transaction, or by an administrator."""


@contextlib.contextmanager
def translate_errors(url: str, *, callers: bool = False) -> Iterator[None]:
    """Driver errors become StoreErrors, with the original as the cause.
    `callers`: on a connection of the caller's, whose transaction is theirs to
    roll back and try again (due's own are rolled back here)."""
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
    except psycopg.errors.UniqueViolation as error:
        raise DuplicateError(f"{redact(url)}: {error}") from error
    except psycopg.errors.LockNotAvailable as error:
        raise LockWaitTimeout(f"{redact(url)}: {error}") from error
    except (UnicodeEncodeError, OverflowError) as error:  # a parameter the driver cannot send
        raise ValueRefused(f"{redact(url)}: a value could not be sent: {error}") from error
    except psycopg.Error as error:
        if is_pooler_breakage(error):
            raise StoreUnavailableError(f"{redact(url)}: {HINT} ({str(error).strip()})") from error
        cancelled = error.sqlstate == QUERY_CANCELED
        if isinstance(error, psycopg.OperationalError) and not (
            _rolled_back(error.sqlstate) or cancelled
        ):
            raise StoreUnavailableError(f"{redact(url)} is unreachable: {error}") from error
        raise refusal(url, error.sqlstate, error, callers=callers) from error


def _rolled_back(state: str | None) -> bool:
    state = state or ""
    return state.startswith("40") or state in ROLLED_BACK_STATES


def refusal(url: str, state: str | None, error: Exception, *, callers: bool) -> StoreError:
    """The due error for a statement the database refused with SQLSTATE `state`
    (any driver's: psycopg's, or asyncpg's through SQLAlchemy). `callers`: on a
    connection of the caller's, whose transaction is theirs to roll back."""
    state = state or ""
    if state == "23505":
        return DuplicateError(f"{redact(url)}: {error}")
    if state == "55P03":
        return LockWaitTimeout(f"{redact(url)}: {error}")
    if _rolled_back(state) and callers:
        return StoreConflictError(
            f"{redact(url)}: a statement on your connection was ended ({state}: "
            f"{str(error).strip()}); nothing of this call was kept: roll your transaction "
            "back and run it again"
        )
    if _rolled_back(state):
        return StoreConflictError(
            f"{redact(url)}: this transaction was rolled back ({state}: "
            f"{str(error).strip()}); nothing was written, and trying again is safe"
        )
    if state == QUERY_CANCELED:
        return StoreUnavailableError(
            f"{redact(url)}: the statement was cancelled (a statement timeout, or by an "
            f"administrator): {str(error).strip()}"
        )
    if state == "42P01" and callers:
        return StoreError(
            f"{redact(url)}: your connection's database has no due_jobs table ({error}): "
            "pass a connection to this App's database, migrated (due migrate), with "
            "due's schema on its search_path"
        )
    if state[:2] in VALUE_STATE_CLASSES:
        return ValueRefused(f"{redact(url)}: {error}")
    if state:  # sent by the server (psycopg's own errors have no SQLSTATE)
        return StatementRefused(f"{redact(url)}: {error}")
    # psycopg's own DataError (no SQLSTATE) stays a plain StoreError: it is met
    # sending a value (nothing written) and reading a reply (after the commit:
    # a time past year 9999), and only the first is a row's fault.
    return StoreError(f"{redact(url)}: {error}")
