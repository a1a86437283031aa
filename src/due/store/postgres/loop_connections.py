"""The store's own async connection in each event loop that enqueues.

`await task.aenqueue(...)` without a connection of the caller's used to hand
the enqueue to a thread and back (`asyncio.to_thread`): one after the other,
as a request handler enqueues, 570 us a job against 428 for `task.enqueue`,
and 290 us of the client's CPU against 135 (bench/costs.py). Here each event
loop that enqueues again gets one connection of the store's, which sends the
one autocommitted statement from the loop itself. A loop's first enqueue
still takes a thread: a loop that lives for one enqueue (`asyncio.run` per
call, a sync-to-async bridge) would otherwise open a session for each, six
milliseconds where the thread takes one.

One coroutine uses a loop's connection at a time; another that finds it busy
is told so at once (`borrow` yields None). The store's enqueues do not come
to that: those made while the loop's statement runs wait for it, and are
written together in the next (store/enqueue_groups.py).

Like the store's own sync connection (own_connection.py), a connection is
checked before each use: one the server ended while it sat idle is
replaced, and so is one that has lived an hour. A caller cancelled while its
statement runs (a request handler given up on) leaves the session idle:
psycopg asks the server to cancel the statement and waits for that (up to
seconds, and closes the connection if the server does not answer). The job
is then usually not created; it is when the statement had committed before
the cancel arrived, as on a thread, where it always runs to the end.

A loop that closes does not say so: its connection is closed when the next
loop borrows one, or by `close()` (app.close()); a loop left open keeps its
connection until then. Both close it synchronously, through libpq, since an
async close needs the loop, which may be gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from due.store.postgres.own_connection import MAX_LIFETIME, reusable

Connect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]


@dataclass
class _Held:
    conn: psycopg.AsyncConnection[Any] | None = None
    born: float = 0.0
    busy: bool = False
    asked: bool = False
    """The loop has enqueued before (its first enqueue takes a thread)."""


class LoopConnections:
    def __init__(
        self,
        connect: Connect,
        monotonic: Callable[[], float],
        max_lifetime: float = MAX_LIFETIME,
    ) -> None:
        self._connect = connect
        self._monotonic = monotonic
        self._max_lifetime = max_lifetime
        self._by_loop: dict[asyncio.AbstractEventLoop, _Held] = {}
        self._lock = threading.Lock()
        """Guards the table: loops may run in several threads (each uses only its own entry)."""
        self._closed = False

    @contextlib.asynccontextmanager
    async def borrow(self) -> AsyncIterator[psycopg.AsyncConnection[Any] | None]:
        """This loop's connection, idle; or None on the loop's first enqueue,
        while another coroutine of the loop has it, or once the store is closed."""
        held = self._take(asyncio.get_running_loop())
        if held is None:
            yield None
            return
        try:
            conn = await self._ready(held)
            try:
                yield conn
            except psycopg.errors.FeatureNotSupported:
                # "cached plan must not change result type" (another process
                # migrated a table): this session's prepared statements are stale.
                _finish(conn)
                raise
        finally:
            with self._lock:  # against close() in another thread
                if self._closed and held.conn is not None:
                    _finish(held.conn)
                held.busy = False

    def close(self) -> None:
        """Close every connection that no coroutine is using (a busy one is
        closed by its borrower when it is done)."""
        with self._lock:
            self._closed = True
            held_by_loop, self._by_loop = self._by_loop, {}
            for held in held_by_loop.values():
                if held.conn is not None and not held.busy:
                    _finish(held.conn)

    def _take(self, loop: asyncio.AbstractEventLoop) -> _Held | None:
        """The loop's entry, now busy; None if it may not be used now."""
        with self._lock:
            if self._closed:
                return None
            for other in [other for other in self._by_loop if other.is_closed()]:
                gone = self._by_loop.pop(other)
                if gone.conn is not None:
                    _finish(gone.conn)
            held = self._by_loop.setdefault(loop, _Held())
            if held.busy or not held.asked:
                held.asked = True
                return None
            held.busy = True
            return held

    async def _ready(self, held: _Held) -> psycopg.AsyncConnection[Any]:
        conn = held.conn
        if conn is not None:
            if reusable(conn, self._monotonic() - held.born, self._max_lifetime):
                return conn
            _finish(conn)
        held.conn = None
        held.conn = conn = await self._connect()
        held.born = self._monotonic()
        return conn


def _finish(conn: psycopg.AsyncConnection[Any]) -> None:
    """Close it without its event loop (libpq's PQfinish: the socket is closed;
    psycopg then sees the connection closed)."""
    conn.pgconn.finish()
