"""The store's own PostgreSQL connection, kept beside its pool.

A pool checkout and return cost 50-90 us, about a fifth of a one-row insert
such as a single enqueue. So the store keeps one connection for whichever
thread finds it free; any other thread uses the pool at once, so no thread
waits for another or shares its transaction. Like a pooled connection, it is
left idle after each use, replaced when the server cut it or when it has
lived an hour, and refused once the store is closed.

A connection the server ended while it sat idle (a restart, a failover that
closed its sessions, an administrator's `pg_terminate_backend`) is found
before it is used, not by the caller's statement failing: `dropped_by_server`
checks it on every borrow, and on every checkout from the pools
(`live_connection`).
"""

from __future__ import annotations

import contextlib
import select
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import psycopg_pool
from psycopg.pq import PipelineStatus, TransactionStatus

MAX_LIFETIME = 3600.0
"""Seconds, as psycopg_pool's default: a long-lived session keeps growing
caches (prepared statements, catalog) and pins whatever server it reached."""

_RECOVERABLE = (TransactionStatus.IDLE, TransactionStatus.INTRANS, TransactionStatus.INERROR)


class OwnConnection:
    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        monotonic: Callable[[], float],
        max_lifetime: float = MAX_LIFETIME,
    ) -> None:
        self._connect = connect
        self._monotonic = monotonic
        self._max_lifetime = max_lifetime
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._born = 0.0
        self._closed = False

    @contextlib.contextmanager
    def borrow(self) -> Iterator[psycopg.Connection[Any] | None]:
        """The connection, idle; or None while another thread has it."""
        acquired = False
        try:
            acquired = self._lock.acquire(blocking=False)
            if not acquired:
                yield None
                return
            conn = self._ready()
            try:
                yield conn
            except psycopg.errors.FeatureNotSupported:
                # e.g. "cached plan must not change result type" after another
                # process migrated a table: this session's prepared statements
                # are stale for good, a new session is not.
                conn.close()
                raise
            finally:
                _leave_idle(conn)
                if self._closed:
                    conn.close()
        finally:
            if acquired:
                self._lock.release()

    def in_use(self) -> bool:
        return self._lock.locked()

    def close(self, wait: float = 2.0) -> None:
        """Close it now, or, if a thread is using it, when that thread is done
        (without waiting for long, and without a deadlock when that thread is
        the caller)."""
        self._closed = True
        if not self._lock.acquire(timeout=wait):
            return
        try:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        finally:
            self._lock.release()

    def _ready(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise psycopg_pool.PoolClosed("the store was closed (app.close())")
        conn = self._conn
        if conn is not None:
            if reusable(conn, self._monotonic() - self._born, self._max_lifetime):
                return conn
            conn.close()
        self._conn = None
        conn = self._conn = self._connect()
        self._born = self._monotonic()
        return conn


def reusable(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], age: float, max_lifetime: float
) -> bool:
    """Whether a connection of the store's own, idle, may carry the next statement:
    open, younger than `max_lifetime` seconds, and not ended by the server."""
    return not conn.closed and age < max_lifetime and not dropped_by_server(conn)


def dropped_by_server(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection has something to read: a server ends a session
    by sending a FATAL error and closing the socket, which an idle connection only
    sees when its next statement fails. due's sessions other than LISTEN ones are
    sent nothing while idle, so anything waiting means the session is gone (or,
    rarely, a notice: then a new session costs one connect). One poll of the
    socket, a few microseconds. (A server host that vanished without closing
    its sockets leaves nothing to read: the keepalives and the TCP user timeout
    fail such a connection during its next statement.)"""
    if conn.closed:
        return True
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return True  # libpq has no socket for it: it is broken
    return _readable(fd)


def _readable(fd: int) -> bool:
    if hasattr(select, "poll"):  # any descriptor number (select() stops at 1024)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)  # Windows: sockets only, no limit
    return bool(readable)


@contextlib.contextmanager
def live_connection(pool: psycopg_pool.ConnectionPool) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the pool that the server has not ended while it sat idle:
    each one found ended is closed (the pool discards it) and the next taken at
    once. (psycopg_pool's own `check` would wait 1, 2, 4 s between two failed
    checks, and after a restart every idle connection of the pool has failed.)"""
    for _ in range(pool.max_size):
        with pool.connection() as conn:
            if dropped_by_server(conn):
                conn.close()
                continue
            yield conn
            return
    with pool.connection() as conn:  # every idle one was ended: this one is new
        yield conn


@contextlib.asynccontextmanager
async def live_async_connection(
    pool: psycopg_pool.AsyncConnectionPool, timeout: float
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """`live_connection` for an async pool, each checkout within `timeout`."""
    for _ in range(pool.max_size):
        async with pool.connection(timeout=timeout) as conn:
            if dropped_by_server(conn):
                await conn.close()
                continue
            yield conn
            return
    async with pool.connection(timeout=timeout) as conn:
        yield conn


def _leave_idle(conn: psycopg.Connection[Any]) -> None:
    """As the pool does on return: no transaction left open; a connection that
    cannot surely be brought back to idle is closed (and replaced on next use)."""
    if conn.closed:
        return
    pgconn = conn.pgconn  # not conn.info, which is built anew on every read
    status, pipeline = pgconn.transaction_status, pgconn.pipeline_status
    if status == TransactionStatus.IDLE and pipeline == PipelineStatus.OFF:
        return
    if status not in _RECOVERABLE or pipeline != PipelineStatus.OFF:
        conn.close()  # a statement still running, or a pipeline left open
        return
    try:
        conn.rollback()
    except psycopg.Error:
        conn.close()
