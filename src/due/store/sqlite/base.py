"""SQLite plumbing shared by the store's parts: connections, transactions, schema.

Durability first: WAL with `synchronous=FULL`, because an acknowledged
enqueue is a promise (a power cut must not take it back). Every writing
transaction is `BEGIN IMMEDIATE`, so writers queue on SQLite's single write
lock (bounded by `busy_timeout`) instead of failing halfway; claims are
therefore serialised and no row is ever claimed twice.

Each thread gets its own connection (sqlite3 connections are not shared
across threads); times are stored as REAL Unix seconds and "now" is this
host's clock unless a clock is injected. The store is one class
(`store.SQLiteStore`) assembled from mixins: jobs (`store.py`), workers
(`workers.py`), schedules and leases (`schedules.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Self

from due.clock import Clock, SystemClock
from due.errors import ConfigurationError, NotMigratedError, StoreError, StoreUnavailableError
from due.store import pieces
from due.store.protocol import ChangeFeed
from due.store.sql import load_migrations, load_queries, require_current_schema

QUERIES = load_queries("due.store.sqlite")
MIGRATIONS = load_migrations("due.store.sqlite")
LATEST_VERSION = MIGRATIONS[-1].version
DEFAULT_BUSY_TIMEOUT = 30.0
_REAL_CLOCK = SystemClock()
TIME_COLUMNS = (
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
    "progress_at",
)
JSON_COLUMNS = ("payload", "errors", "result", "checkpoint", "progress")


def path_from_url(url: str) -> str:
    """`sqlite:///relative.db` or `sqlite:////absolute/path.db` → a file path."""
    if not url.startswith("sqlite:///"):
        raise ConfigurationError(
            f"SQLite URL {url!r} must look like sqlite:///relative/path.db "
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


class SQLiteBase:
    single_writer = True

    def __init__(
        self, url: str, clock: Clock, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    ) -> None:
        self.url = url
        self.path = path_from_url(url)
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    # --- plumbing -----------------------------------------------------------

    def _now(self) -> float:
        return (self._clock.now() or self._clock.wall()).timestamp()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

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

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        with translate_errors(self.path):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _read(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        with translate_errors(self.path):
            return [dict(row) for row in self._connection().execute(QUERIES[name], params)]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    # --- schema ---------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied_now = []
        with self._write() as conn:
            conn.execute(QUERIES["create_migrations_table"])
            current = conn.execute(QUERIES["schema_version"]).fetchone()["version"] or 0
            if current > LATEST_VERSION:
                require_current_schema(current, LATEST_VERSION, self._where())
            for migration in MIGRATIONS:
                if migration.version > current:
                    for statement in _statements(migration.sql):
                        conn.execute(statement)
                    conn.execute(
                        QUERIES["record_migration"],
                        {"version": migration.version, "name": migration.name, "now": self._now()},
                    )
                    applied_now.append(migration.version)
        return applied_now

    def schema_version(self) -> int | None:
        if not self._read("migrations_table_exists", {})[0]["present"]:
            return None
        version = self._read("schema_version", {})[0]["version"]
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

    def now(self) -> datetime:
        return to_datetime(self._now())

    # --- for the worker (wake-ups) --------------------------------------------------

    def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap wake-up check."""
        with translate_errors(self.path):
            return int(self._connection().execute("PRAGMA data_version").fetchone()[0])

    def watch_endings(self) -> ChangeFeed:
        return CommitFeed(self)


class CommitFeed:
    """Waits for a commit by another connection (`PRAGMA data_version`, read every
    few milliseconds on this thread's connection: microseconds each)."""

    POLL_SECONDS = 0.005

    def __init__(self, store: SQLiteBase) -> None:
        self._store = store
        self._version: int | None = None

    def wait(self, timeout: float) -> bool:
        if self._version is None:
            self._version = self._store.data_version()
            return True
        deadline = _REAL_CLOCK.monotonic() + timeout  # real time, whatever the store's clock
        while _REAL_CLOCK.monotonic() < deadline:
            version = self._store.data_version()
            if version != self._version:
                self._version = version
                return True
            time.sleep(self.POLL_SECONDS)
        return False

    def close(self) -> None:
        self._version = None


MAX_CLOCK_SKEW_SECONDS = 2.0


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


def epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def to_datetime(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def python_row(row: dict[str, Any]) -> dict[str, Any]:
    for name in TIME_COLUMNS:
        if row.get(name) is not None:
            row[name] = to_datetime(row[name])
    for name in JSON_COLUMNS:
        if row.get(name) is not None:
            with contextlib.suppress(json.JSONDecodeError):  # else kept as text, shown
                row[name] = json.loads(row[name])  # as it is; a claim fails that job alone
    return row


@contextlib.contextmanager
def translate_errors(path: str) -> Iterator[None]:
    """Driver errors become StoreErrors, with the original as the cause."""
    try:
        yield
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            raise StoreUnavailableError(
                f"SQLite database {path} stayed locked by another writer: {error}"
            ) from error
        raise StoreError(f"SQLite database {path}: {error}") from error
    except sqlite3.Error as error:
        raise StoreError(f"SQLite database {path}: {error}") from error


def piece_queries(conn: sqlite3.Connection) -> pieces.Execute:
    """Named queries run in the connection's transaction, for due.store.pieces."""

    def execute(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        cursor = conn.execute(QUERIES[name], params)
        return [dict(row) for row in cursor.fetchall()] if cursor.description else []

    return execute


def settle(conn: sqlite3.Connection, ended: list[dict[str, Any]], now: float) -> None:
    """Count jobs that ended on their parents (and settle those), in the caller's
    transaction; nothing to do for jobs without parent or pieces."""
    if any(pieces.concerns_a_parent(row) for row in ended):
        pieces.settle(piece_queries(conn), ended, now)
