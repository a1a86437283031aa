"""SQLite under the store: the embedded default, one host, any number of processes.

Durability first: WAL with `synchronous=FULL`, because an acknowledged
enqueue is a promise (a power cut must not take it back). Every writing
transaction is `BEGIN IMMEDIATE`, so writers queue on SQLite's single write
lock (bounded by `busy_timeout`) instead of failing halfway; claims are
therefore serialised and no row is ever claimed twice. Writers of one process
queue on a lock of the process first (`writer_lock`): SQLite's own wait for a
busy lock sleeps 1, 2, 5, 10 ms and more between tries, which stalled the
worker's claims behind its own acknowledgements and heartbeats; a lock held
in the process wakes the next writer the instant it is released. Against
another process's writer, due tries again every millisecond
(`_begin_immediate`), not after SQLite's growing sleeps, so a web process's
enqueue beside a busy worker gets its turn within milliseconds.

Each thread gets its own connection (sqlite3 connections are not shared
across threads). Times are stored as REAL Unix seconds and "now" is this
host's clock unless a clock is injected; a process whose clock disagrees
with the kernel's refuses to start (`check_host_clock`). Lists go in as JSON
text (read with `json_each`), and a batch statement runs once per row.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from due.clock import Clock, SystemClock
from due.errors import ConfigurationError, NotMigratedError, StoreError, StoreUnavailableError
from due.redaction import redact_url
from due.store.all_or_none import SAVEPOINT, AllOrNone, kept_all_or_none
from due.store.backend import (
    Batch,
    ChangeFeed,
    Columns,
    DuplicateError,
    Rows,
    Transaction,
    ValueRefused,
    Values,
)
from due.store.sql import load_migrations, load_queries, require_current_schema
from due.store.sqlalchemy_connections import (
    check_database,
    is_sqlalchemy,
    sync_connection,
)
from due.store.sqlite.doorbell import Bell, Doorbell
from due.store.sqlite.writer_turns import WriterTurns, turn_wait

QUERIES = load_queries("due.store.sqlite")
MIGRATIONS = load_migrations("due.store.sqlite")
LATEST_VERSION = MIGRATIONS[-1].version
DEFAULT_BUSY_TIMEOUT = 30.0
MAX_CLOCK_SKEW_SECONDS = 2.0
DEFAULT_COMMIT_POLL = 0.005
"""How often a worker's feed reads `PRAGMA data_version`: the wake-up for
commits that ring no doorbell (doorbell.py)."""
MAX_COMMIT_POLL = 60.0
RINGING = frozenset(
    {
        "complete_jobs",
        "drop_undeclared_limits",
        "hold_group",
        "insert_completion_job",
        "insert_job",
        "insert_pieces",
        "insert_scheduled_job",
        "notify_queues",
        "release_jobs",
        "release_steps",
        "rescue_jobs",
        "retry_job",
        "retry_pieces",
        "retry_plain_jobs",
        "retry_workflow_steps",
        "set_queue_paused",
        "unblock_freed",
        "unblock_jobs",
    }
)
"""The statements after whose commit the workers' doorbells are rung: those that
make a job claimable, the same that send a NOTIFY on PostgreSQL
(tests/store/test_schema.py holds the two lists together)."""
_REAL_CLOCK = SystemClock()
TIME_COLUMNS = frozenset(
    {
        "run_at",
        "lease_expires_at",
        "created_at",
        "started_at",
        "finished_at",
        "scheduled_for",
        "next_fire_at",
        "updated_at",
        "recorded_at",
        "last_run_at",
        "last_success_at",
        "oldest_due",
        "limited_oldest_due",
        "progress_at",
        "last_seen_at",
        "stopped_at",
        "now",
        "minute",
        "last_failed_at",
        "at",
    }
)
JSON_COLUMNS = frozenset(
    {"payload", "errors", "result", "checkpoint", "progress", "queues", "tasks", "ids"}
)


def path_from_url(url: str) -> str:
    """`sqlite:///relative.db` or `sqlite:////absolute/path.db` → a file path."""
    if not url.startswith("sqlite:///"):
        raise ConfigurationError(
            f"SQLite URL {redact_url(url)!r} must look like sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    path = url[len("sqlite:///") :].split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file::memory:"):
        raise ConfigurationError(
            "an in-memory SQLite database cannot be shared by workers; "
            "give a file path, e.g. sqlite:///due.db"
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigurationError(f"SQLite database folder {directory!r} does not exist")
    return path


SHORT_BUSY_WAIT = "PRAGMA busy_timeout = 1"
"""While taking the write lock: SQLite sleeps 1 ms and says busy. A connection
keeps it from one write transaction to the next, and is given its full wait
back before a read: a write transaction, once it holds the lock, never waits
again (a WAL commit takes no other lock, and its automatic checkpoint is a
passive one, which never waits), but a read may wait on a recovery. Setting it
and setting it back around every write cost a single enqueue about a tenth of
its time."""


def _all_or_none(connection: sqlite3.Connection) -> AllOrNone:
    """What keeps a caller's statements all or none (on_connection's `atomic`):
    in the caller's transaction, a savepoint; on a connection in autocommit, a
    transaction of its own; with Python's implicit transactions and none open
    yet, the caller's transaction opened as the first INSERT would have opened
    it, then a savepoint in it."""
    if connection.in_transaction:
        return SAVEPOINT
    if connection.isolation_level is None or getattr(connection, "autocommit", None) is True:
        return AllOrNone(("BEGIN IMMEDIATE",), "COMMIT", ("ROLLBACK",))
    return SAVEPOINT._replace(start=(f"BEGIN {connection.isolation_level}", *SAVEPOINT.start))


def _locked(error: sqlite3.OperationalError) -> bool:
    return "locked" in str(error) or "busy" in str(error)


class _WriterLocks:
    """The process's writer locks, one per database file, and its turns at each
    file's write lock among processes (writer_turns.py)."""

    def __init__(self) -> None:
        self.by_file: dict[str, threading.RLock] = {}
        self.turns: dict[str, WriterTurns] = {}
        self.renew()

    def renew(self) -> None:
        """New locks, none held (also in a forked child, where the parent's
        turns' files are closed)."""
        for turns in self.turns.values():
            turns.close()
        self.guard = threading.Lock()
        self.by_file = {}
        self.turns = {}
        self.pid = os.getpid()

    def get(self, key: str) -> threading.RLock:
        self._in_this_process()
        lock = self.by_file.get(key)
        if lock is None:
            with self.guard:
                lock = self.by_file.setdefault(key, threading.RLock())
        return lock

    def turns_of(self, key: str) -> WriterTurns:
        self._in_this_process()
        turns = self.turns.get(key)
        if turns is None:
            with self.guard:
                turns = self.turns.setdefault(key, WriterTurns(key))
        return turns

    def _in_this_process(self) -> None:
        """Renewed in a child forked without Python's fork handlers (uWSGI
        without py-call-osafterfork), where _unlock_in_child never ran: a lock
        one of the parent's threads held would stay held by a thread the child
        lacks, and the parent's turn-taking thread is not in it either."""
        if self.pid != os.getpid():
            self.renew()


_WRITER_LOCKS = _WriterLocks()


def writer_lock(path: str) -> threading.RLock:
    """The lock this process's writers of that database file take in turn (one
    per file, whichever backends open it). Re-entrant, so that a thread opening
    a second write transaction inside its first meets SQLite's own refusal, as
    before, and not a deadlock."""
    return _WRITER_LOCKS.get(os.path.realpath(path))


def _unlock_in_child() -> None:
    """A child forked while one of the parent's threads held a writer lock would
    inherit it held, by a thread it does not have: the child starts with its own."""
    _WRITER_LOCKS.renew()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_unlock_in_child)


class SQLiteBackend:
    single_writer = True
    leaves_dead_rows = False
    counting_statements = False
    locks_rows = False

    def __init__(
        self,
        url: str,
        clock: Clock,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        commit_poll: float = DEFAULT_COMMIT_POLL,
    ) -> None:
        self.url = url
        self.path = path_from_url(url)
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._turn_wait = turn_wait(busy_timeout)
        if (
            isinstance(commit_poll, bool)
            or not isinstance(commit_poll, int | float)
            or not 0 < commit_poll <= MAX_COMMIT_POLL
        ):
            raise ConfigurationError(
                f"store_options commit_poll= takes seconds between 0 and {MAX_COMMIT_POLL:g} "
                f"(how often a worker looks for another process's commit), got {commit_poll!r}"
            )
        self.commit_poll = float(commit_poll)
        self._bell = Bell(self.path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._busy: dict[sqlite3.Connection, int] = {}
        """Connections a thread is using now: how many uses deep (a read inside
        a handler's transaction is a use inside a use)."""
        self._closed = False
        """For good: a closed store opens no connection again, and one in use
        when it closed is closed by its thread when that use ends."""
        self._lock = threading.Lock()
        self._writer_key = os.path.realpath(self.path)

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
        with self._in_use() as conn, translate_errors(self.path):
            if read:
                self._wait_fully(conn)
                yield SQLiteTransaction(conn, self._now())
                return
            asked = self._clock.monotonic()
            writer = _WRITER_LOCKS.get(self._writer_key)  # looked up: a forked child has new ones
            if not writer.acquire(timeout=self._busy_timeout):
                raise StoreUnavailableError(
                    f"SQLite database {self.path} stayed locked by another writer of this "
                    f"process for {self._busy_timeout:g}s"
                )
            turns = _WRITER_LOCKS.turns_of(self._writer_key)
            turn = False
            try:
                patience = self._busy_timeout - (self._clock.monotonic() - asked)
                turn = turns.take(min(self._turn_wait, patience))  # (held longer: frozen?)
                waited = self._clock.monotonic() - asked
                self._begin_immediate(conn, self._busy_timeout - waited)
                try:
                    tx = SQLiteTransaction(conn, self._now())
                    yield tx
                    # Inside the try: a COMMIT SQLite refuses (a full disk, an I/O
                    # error, a deferred constraint) leaves the transaction open, and
                    # with it the file's write lock, for every later write to wait on.
                    conn.execute("COMMIT")
                except BaseException:
                    self._roll_back(conn)
                    raise
            finally:
                if turn:
                    turns.give_back()  # (never raises: the writer lock is let go too)
                writer.release()
            if tx.rings:  # committed: the workers find the job when they wake
                self._bell.ring()

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        """End a failed write transaction, keeping the caller's error. If SQLite
        already rolled it back (an I/O error, RAISE(ROLLBACK)), nothing is left to
        do; if the ROLLBACK fails too, the connection is closed (which ends the
        transaction and frees the write lock) and this thread opens a new one."""
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            self._discard(conn)

    def _discard(self, conn: sqlite3.Connection) -> None:
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
            self._local.short_wait = False
        with self._lock:
            if conn in self._connections:
                self._connections.remove(conn)
        conn.close()

    def _begin_immediate(self, conn: sqlite3.Connection, patience: float) -> None:
        """Take the file's write lock, trying again about every millisecond for
        `patience` seconds while another process holds it. SQLite's own wait
        sleeps longer and longer between tries (1, 2, 5 ... 100 ms): beside a
        worker draining flat out, a web process's enqueue waited 430 ms at the
        99th percentile, 11 to 12 ms with these tries (bench/sqlite_contention.py).
        Each try waits 1 ms inside SQLite (busy_timeout = 1)."""
        if not getattr(self._local, "short_wait", False):
            conn.execute(SHORT_BUSY_WAIT)
            self._local.short_wait = True
        for _ in range(max(1, round(patience * 1000))):
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if not _locked(error):
                    raise
        conn.execute("BEGIN IMMEDIATE")  # the last try: its error is the caller's

    def _wait_fully(self, conn: sqlite3.Connection) -> None:
        """Give this thread's connection its full busy wait back (SHORT_BUSY_WAIT)."""
        if getattr(self._local, "short_wait", False):
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            self._local.short_wait = False

    @contextlib.contextmanager
    def on_connection(
        self, connection: Any, call: str, *, atomic: bool = False
    ) -> Iterator[Transaction]:
        if is_sqlalchemy(connection):
            from due.store.sqlite import on_sqlalchemy  # (it imports this)

            lent = sync_connection(connection, call)
            check_database(
                lent,
                "sqlite",
                call,
                theirs=on_sqlalchemy.sqlite_file,
                ours=self._writer_key,
                shown=self.path,
            )
            with (
                on_sqlalchemy.translated(self.path),
                on_sqlalchemy.kept_on_sqlalchemy(lent, atomic) as through,
            ):
                lent_tx = SQLiteTransaction(through, self._now())  # type: ignore[arg-type]
                yield lent_tx
            # As below: committed already (autocommit) rings; the caller's commit is theirs.
            driver = lent.connection.driver_connection  # sqlite3's, or aiosqlite's
            if lent_tx.rings and driver is not None and not driver.in_transaction:
                self._bell.ring()
            return
        if not isinstance(connection, sqlite3.Connection):
            raise ConfigurationError(
                f"{call} takes a sqlite3.Connection for a SQLite app, "
                f"got {type(connection).__name__}"
            )
        with translate_errors(self.path):
            tx = SQLiteTransaction(connection, self._now())
            if not atomic:
                yield tx
            else:
                with kept_all_or_none(connection.execute, _all_or_none(connection), sqlite3.Error):
                    yield tx
        # Committed already (a connection in autocommit): ring. Still in the caller's
        # transaction: its COMMIT is out of sight, and the workers' poll finds it.
        if tx.rings and not connection.in_transaction:
            self._bell.ring()

    def on_async_connection(self, connection: Any, call: str, *, atomic: bool = False) -> Any:
        raise ConfigurationError(
            f"a SQLite app has no async connections; call the sync form of {call} with a "
            "sqlite3.Connection"
        )

    @contextlib.contextmanager
    def handler_transaction(self) -> Iterator[tuple[Any, Transaction]]:
        with self.transaction() as tx:
            assert isinstance(tx, SQLiteTransaction)
            yield tx.connection, tx

    def writing_on_this_thread(self) -> bool:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        return conn is not None and conn.in_transaction

    def now(self) -> datetime:
        return to_datetime(self._now())

    def _now(self) -> float:
        return (self._clock.now() or self._clock.wall()).timestamp()

    # --- connections --------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:  # a part still holding the store (a thread in line)
                raise self._closed_error()
            conn = self._open()
            with self._lock:
                if self._closed:  # closed meanwhile: this one would never be
                    conn.close()
                    raise self._closed_error()
                self._connections.append(conn)
            self._local.conn = conn
        return conn

    def _closed_error(self) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"SQLite database {self.path}: this app's store was closed (app.close()); "
            "use an open App"
        )

    def _open(self) -> sqlite3.Connection:
        with translate_errors(self.path):
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,  # we issue BEGIN IMMEDIATE ourselves
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        return conn

    def loop_lane(self, connections: int) -> None:
        """None: one writer at a time, its commit the cost; calls take a thread."""
        return None

    @contextlib.asynccontextmanager
    async def loop_statement(self) -> AsyncIterator[None]:
        """None, as loop_lane: sqlite3 has no async connections."""
        yield None

    def close(self) -> None:
        """Close every connection; one another thread is using (a write waiting
        for the lock, say) is closed by that thread when its use ends: closing
        it under the thread crashed the process (a segfault in sqlite3)."""
        with self._lock:
            self._closed = True
            for conn in self._connections:
                if conn not in self._busy:  # a busy one: by its thread, after
                    conn.close()
            self._connections.clear()
        self._local = threading.local()
        self._bell.close()

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, marked busy while it is used (see `close`)."""
        conn = self._connection()
        with self._lock:
            self._busy[conn] = self._busy.get(conn, 0) + 1
        try:
            yield conn
        finally:
            with self._lock:
                depth = self._busy.pop(conn) - 1
                if depth:
                    self._busy[conn] = depth
                left_to_this_thread = not depth and self._closed
            if left_to_this_thread:
                conn.close()

    # --- schema ---------------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied_now = []
        with self.transaction() as tx:
            assert isinstance(tx, SQLiteTransaction)
            tx.run("create_migrations_table")
            current = tx.run("schema_version")[0]["version"] or 0
            if current > LATEST_VERSION:
                require_current_schema(current, LATEST_VERSION, self._where())
            for migration in MIGRATIONS:
                if migration.version > current:
                    for statement in _statements(migration.sql):
                        tx.connection.execute(statement)
                    params = {"version": migration.version, "name": migration.name}
                    tx.run("record_migration", {**params, "now": tx.now})
                    applied_now.append(migration.version)
        return applied_now

    def empty(self) -> None:
        with self.transaction() as tx:
            assert isinstance(tx, SQLiteTransaction)
            for statement in _statements(QUERIES["empty_tables"] + ";"):
                tx.connection.execute(statement)

    def schema_version(self) -> int | None:
        with self.transaction(read=True) as tx:
            if not tx.run("migrations_table_exists")[0]["present"]:
                return None
            version = tx.run("schema_version")[0]["version"]
            return int(version) if version is not None else None

    def check_schema(self) -> None:
        if self._clock.now() is None:  # the host's clock, not one injected by a test
            check_host_clock(os.path.dirname(os.path.abspath(self.path)))
        if not os.path.exists(self.path):
            # Checked before any connection opens one: looking creates nothing.
            raise NotMigratedError(
                f"SQLite database {os.path.abspath(self.path)} does not exist; check --url "
                "(or DUE_DATABASE_URL), or create it with `due migrate` (or app.migrate())"
            )
        require_current_schema(self.schema_version(), LATEST_VERSION, self._where())

    def _where(self) -> str:
        return f"SQLite database {self.path}"

    # --- wake-ups ---------------------------------------------------------------------

    def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap wake-up check."""
        with self._in_use() as conn, translate_errors(self.path):
            self._wait_fully(conn)
            return int(conn.execute("PRAGMA data_version").fetchone()[0])

    def watch_endings(self) -> ChangeFeed:
        return CommitFeed(self)

    def watch_jobs(self) -> ChangeFeed:
        return CommitFeed(self, doorbell=True)


class SQLiteTransaction:
    locks_rows = False

    def __init__(self, connection: sqlite3.Connection, now: float) -> None:
        self.connection = connection
        self._now = now
        self.rings = False
        """Whether it ran a statement that makes a job claimable (RINGING)."""
        self._cursor = connection.cursor()
        self._cursor.row_factory = None  # tuples, whatever the caller's connection has

    @property
    def now(self) -> float:
        """Unix seconds, as the statements take it (no encoding on every statement)."""
        return self._now

    def instant(self) -> datetime:
        return to_datetime(self._now)

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> Rows:
        description = self._execute(query, params)
        if description is None:
            return []
        names, conversions = _row_plan(description)
        rows = [dict(zip(names, values, strict=True)) for values in self._cursor.fetchall()]
        if conversions:
            for row in rows:
                for name, convert in conversions:
                    value = row[name]
                    if value is not None:
                        row[name] = convert(value)
        return rows

    def run_values(self, query: str, params: Mapping[str, Any] | None = None) -> Values:
        description = self._execute(query, params)
        if description is None:
            return (), []
        names, times = _values_plan(description)
        rows = self._cursor.fetchall()
        if times:
            seen: dict[float, datetime] = {}  # jobs enqueued together share their times
            rows = [_with_times(row, times, seen) for row in rows]
        return names, rows

    def _execute(
        self, query: str, params: Mapping[str, Any] | None
    ) -> tuple[tuple[Any, ...], ...] | None:
        """Run the statement; its result's description (None: it returns no rows)."""
        if query in RINGING:
            self.rings = True
        self._cursor.execute(QUERIES[query], _encoded(params) if params else {})
        return self._cursor.description

    def run_each(self, query: str, rows: Batch, params: Mapping[str, Any] | None = None) -> Rows:
        shared = params or {}
        fields = BATCH_ROWS.get(query)
        if fields is not None:  # one statement for the whole batch
            return self.run(query, {**shared, "rows": _json_rows(rows, fields)})
        found: Rows = []
        for row in rows.rows() if isinstance(rows, Columns) else rows:
            found += self.run(query, {**shared, **row})
        return found

    def run_many(
        self,
        query: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
        params: Mapping[str, Any],
    ) -> int:
        """Rows of one shape: the first says which columns need encoding."""
        rows = iter(rows)
        first = next(rows, None)
        if first is None:
            return 0
        shared = tuple(_value(value) for value in params.values())
        positions = [i for i, value in enumerate(first) if isinstance(value, _ENCODED)]

        def sent(row: tuple[Any, ...]) -> tuple[Any, ...]:
            return (*(_encoded_row(row, positions) if positions else row), *shared)

        if query in RINGING:
            self.rings = True
        self._cursor.executemany(QUERIES[query], map(sent, itertools.chain([first], rows)))
        return self._cursor.rowcount


BATCH_ROWS: dict[str, tuple[str, ...]] = {
    "complete_jobs": ("id", "token", "state", "result", "error", "retry_in", "progress", "warning"),
}
"""Batch statements run once for the whole batch (`run_each`): their `:rows` is a
JSON array of one array per row, these fields in this order (queries.sql reads
them by position). One UPDATE of 1,000 acknowledgements took a fifth of the
time of 1,000 statements of one row each."""


def _json_rows(rows: Batch, fields: tuple[str, ...]) -> str:
    """A batch as `:rows` text. Not ASCII-escaped: a value sqlite3 could not bind
    alone (a lone surrogate) is refused in the batch too, as it was row by row, and
    the batch is written again one row at a time (batches.py)."""
    if isinstance(rows, Columns):
        table = list(zip(*(rows[name] for name in fields), strict=True))
    else:
        table = [tuple(row[name] for name in fields) for row in rows]
    return json.dumps(table, ensure_ascii=False, allow_nan=False)


class CommitFeed:
    """Waits for a commit by another connection: `PRAGMA data_version`, read every
    `commit_poll` seconds on this thread's connection (microseconds each), and,
    for the job feed, at once when the doorbell rings (doorbell.py)."""

    def __init__(self, backend: SQLiteBackend, *, doorbell: bool = False) -> None:
        self._backend = backend
        self._version: int | None = None
        self._next_look = float("-inf")
        """When the poll reads `data_version` again (kept from one wait to the next:
        a caller's short waits do not make the poll faster)."""
        self._wants_doorbell = doorbell
        self.doorbell: Doorbell | None = None

    def messages(self, timeout: float) -> list[str]:
        return [""] if self.wait(timeout) else []

    def wait(self, timeout: float) -> bool:
        if self._version is None:
            if self._wants_doorbell:  # bound before the first look: no ring is missed
                self.doorbell = Doorbell.open(self._backend.path)
            self._look()
            return True
        deadline = _REAL_CLOCK.monotonic() + timeout  # real time, whatever the store's clock
        rang = False
        while True:
            now = _REAL_CLOCK.monotonic()
            # After a ring too: one for a commit the poll already saw wakes nothing.
            if (rang or now >= self._next_look) and self._look():
                return True
            left = deadline - now
            if left <= 0:
                return False
            pause = max(min(self._next_look - now, left), 0.0)
            if self.doorbell is not None:
                rang = self.doorbell.wait(pause)
            else:
                time.sleep(pause)

    def _look(self) -> bool:
        """Whether another connection committed since the last look."""
        version = self._backend.data_version()
        self._next_look = _REAL_CLOCK.monotonic() + self._backend.commit_poll
        changed, self._version = version != self._version, version
        return changed

    def close(self) -> None:
        self._version = None
        self._next_look = float("-inf")
        if self.doorbell is not None:
            self.doorbell.close()
            self.doorbell = None


def check_host_clock(directory: str) -> None:
    """Refuse to work with a clock that disagrees with the system's.

    SQLite has no clock of its own: due times, leases and rescues are this
    host's clock, read by each process. A process whose clock is off (libfaketime,
    a container with a time namespace of its own) would run delayed jobs early
    or take leases over too soon. The kernel stamps a new file with the real
    time, whatever the process's clock says: compare the two.
    """
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".due-clock-") as probe:
        kernel = os.fstat(probe.fileno()).st_mtime
    skew = _REAL_CLOCK.wall().timestamp() - kernel
    if abs(skew) > MAX_CLOCK_SKEW_SECONDS:
        raise ConfigurationError(
            f"this process's clock is {abs(skew):.0f}s {'ahead of' if skew > 0 else 'behind'} "
            "the system's: on SQLite, due times and leases are the host's clock, so every "
            "process must read the same one (is it run under faketime, or in a time namespace?)"
        )


def _statements(script: str) -> list[str]:
    """Split a migration into statements, as SQLite's own tokenizer sees them."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip(" \n") and not all(
        row.strip().startswith("--") or not row.strip() for row in pending.splitlines()
    ):
        raise RuntimeError(f"migration ends with an incomplete statement: {pending[:80]!r}")
    return statements


_ENCODED = (datetime, list, tuple, dict)


def _encoded(params: Mapping[str, Any]) -> Mapping[str, Any]:
    for value in params.values():
        if isinstance(value, _ENCODED):
            return {name: _value(value) for name, value in params.items()}
    return params  # the common case, untouched


def _encoded_row(row: tuple[Any, ...], positions: list[int]) -> list[Any]:
    encoded = list(row)
    for i in positions:
        encoded[i] = _value(encoded[i])
    return encoded


def _value(value: Any) -> Any:
    """A Python value as SQLite stores it: times as Unix seconds, lists and
    mappings as JSON text (read with json_each)."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, list | tuple | dict):
        return json.dumps(value)
    return value


def _with_times(
    row: tuple[Any, ...], positions: tuple[int, ...], seen: dict[float, datetime]
) -> tuple[Any, ...]:
    """The row with its times as datetimes. A claim converts three or four a
    job, and the jobs of one `enqueue_many` share their run_at and created_at,
    the jobs of one claim their lease's end: each distinct time is converted
    once (`seen`, per statement), and `_time`'s checks are inlined."""
    values = list(row)
    for i in positions:
        value = values[i]
        if type(value) is float or type(value) is int:
            converted = seen.get(value)
            if converted is None:
                converted = seen[value] = _FROM_TIMESTAMP(value, UTC)
            values[i] = converted
        elif value is not None:
            values[i] = _time(value)
    return tuple(values)


_FROM_TIMESTAMP = datetime.fromtimestamp


def to_datetime(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


@functools.lru_cache(maxsize=512)
def _row_plan(
    description: tuple[tuple[Any, ...], ...],
) -> tuple[tuple[str, ...], tuple[tuple[str, Callable[[Any], Any]], ...]]:
    """A statement's column names, and how to bring each column that needs it
    into Python types (computed once per shape of result)."""
    names = tuple(column[0] for column in description)
    conversions = tuple(
        (name, _time if name in TIME_COLUMNS else _json)
        for name in names
        if name in TIME_COLUMNS or name in JSON_COLUMNS
    )
    return names, conversions


@functools.lru_cache(maxsize=64)
def _values_plan(
    description: tuple[tuple[Any, ...], ...],
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """`_row_plan` for `run_values`: the names, and the positions of the times
    (JSON stays text)."""
    names = tuple(column[0] for column in description)
    return names, tuple(i for i, name in enumerate(names) if name in TIME_COLUMNS)


def _time(value: Any) -> Any:
    return to_datetime(value) if isinstance(value, int | float) else value


def _json(value: Any) -> Any:
    """Decoded; a value that is not JSON is kept as text (shown as it is; a claim
    fails that job alone)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


VALUE_ERROR_WORDS = ("malformed JSON", "JSON cannot hold", "too big", "too large")
"""What SQLite says, as an OperationalError, of a value it cannot take (its JSON
functions' refusals, a string or blob over its limit): the rows' fault
(ValueRefused), unlike a full disk or an I/O error."""


@contextlib.contextmanager
def translate_errors(path: str) -> Iterator[None]:
    """Driver errors become StoreErrors, with the original as the cause."""
    try:
        yield
    except sqlite3.IntegrityError as error:
        if "UNIQUE" in str(error):
            raise DuplicateError(f"SQLite database {path}: {error}") from error
        raise ValueRefused(f"SQLite database {path}: {error}") from error
    except sqlite3.DataError as error:  # a value SQLite cannot take: nothing written
        raise ValueRefused(f"SQLite database {path}: {error}") from error
    except (UnicodeEncodeError, OverflowError) as error:  # a parameter sqlite3 cannot bind
        raise ValueRefused(f"SQLite database {path}: a value could not be sent: {error}") from error
    except sqlite3.OperationalError as error:
        if _locked(error):
            raise StoreUnavailableError(
                f"SQLite database {path} stayed locked by another writer: {error}"
            ) from error
        if any(words in str(error) for words in VALUE_ERROR_WORDS):
            raise ValueRefused(f"SQLite database {path}: {error}") from error
        raise StoreError(f"SQLite database {path}: {error}") from error
    except sqlite3.Error as error:
        raise StoreError(f"SQLite database {path}: {error}") from error
