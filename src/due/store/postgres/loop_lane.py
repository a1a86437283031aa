"""Statements from the worker's event loop, on psycopg's async connections.

A worker's two hottest statements, the claim and the acknowledgement (each
one autocommitted statement), go from its event loop straight to PostgreSQL
here, without a hop to a database thread and back: no thread wakes up, no
thread hands the result back through the loop's self-pipe, and no database
thread competes with the loop for the GIL while it converts rows. Measured
in-process on 40,000 no-op jobs, six interleaved pairs: median 15,975 jobs/s
against 14,043 through the threads, faster in every pair (bench/NOTES.md).

The lane is a small async pool opened in the worker's loop and closed with
it: a connection for each queue's claims and one for the acknowledgements,
so they run side by side as they did on threads. Sessions are set up as the
store's own (UTC and the statement, lock and idle bounds; through a
transaction-mode pooler, UTC only, as there, and each statement runs in a
transaction that sets the bounds), and plan each statement once
and only through indexes (backend.LANE_SETTINGS). A statement that fails here is
written again by the caller on the thread path, which has the retries and
the rules for stale or refused batches; a connection the server ended while
idle is replaced on checkout, one that broke during a statement is discarded
by the pool, and one whose prepared statements went stale (another process
migrated the table) is closed, so the next statement gets a fresh session.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row, tuple_row

from due.store.postgres.backend import (
    AsyncPostgresTransaction,
    async_pipelined_transaction,
    translate_errors,
)
from due.store.postgres.own_connection import live_async_connection

_Cursors = tuple[psycopg.AsyncCursor[dict[str, Any]], psycopg.AsyncCursor[tuple[Any, ...]]]

CHECKOUT_SECONDS = 1.0
"""How long a statement waits for a connection of the lane before the caller
takes the thread path instead (during an outage the pool cannot connect: the
caller must not wait the whole connect timeout on every claim)."""


class LoopLane:
    def __init__(
        self,
        url: str,
        options: dict[str, Any],
        session: Sequence[str],
        now: Callable[[], datetime | None],
        queries: Callable[[], Mapping[str, str]],
        connect_timeout: float,
        connections: int,
        bounds: Mapping[str, str] | None = None,
    ) -> None:
        self._url = url
        self._bounds = bounds
        """Through a transaction-mode pooler: the statement and lock bounds, set in
        a transaction around each statement (a session setting would leak)."""
        self._session = tuple(session)
        self._now = now
        self._queries = queries
        self._cursors: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], _Cursors] = (
            weakref.WeakKeyDictionary()
        )
        self._pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max(1, connections),
            kwargs=options,
            configure=self._configure,
            timeout=connect_timeout,
            open=False,
            name="due-loop",
        )

    async def open(self) -> None:
        """Open in the running loop (the first connection is made in the background)."""
        await self._pool.open(wait=False)

    async def close(self) -> None:
        await self._pool.close()

    def _cursors_of(self, conn: psycopg.AsyncConnection[Any]) -> _Cursors:
        """The connection's two cursors (rows as dicts, and as tuples), made at its
        first statement and kept with it: a cursor made for each statement found
        its parameters' dumpers and its columns' loaders anew every time, which
        cost an empty claim two thirds of its client time. Rows in binary: a
        claim's times and numbers load a third faster."""
        cursors = self._cursors.get(conn)
        if cursors is None:
            cursors = (
                conn.cursor(row_factory=dict_row, binary=True),
                conn.cursor(row_factory=tuple_row, binary=True),
            )
            self._cursors[conn] = cursors
        return cursors

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        for setting in self._session:
            await conn.execute(setting)

    @contextlib.asynccontextmanager
    async def statement(self) -> AsyncIterator[AsyncPostgresTransaction]:
        """A connection of the lane for one autocommitted statement."""
        with translate_errors(self._url):
            async with live_async_connection(self._pool, CHECKOUT_SECONDS) as conn:
                rows, values = self._cursors_of(conn)
                transaction = AsyncPostgresTransaction(
                    rows,
                    self._now(),
                    self._queries(),
                    to_utc=False,  # UTC sessions
                    values_cursor=values,
                )
                try:
                    if self._bounds is None:
                        yield transaction
                        return
                    # One round trip for BEGIN, the bounds and the statement; one
                    # for the COMMIT.
                    bound = self._queries()["bound_transaction"]
                    async with async_pipelined_transaction(conn, rows, bound, self._bounds):
                        yield transaction
                except psycopg.errors.FeatureNotSupported:
                    # "cached plan must not change result type": this session's
                    # prepared statements are stale for good, a new one's are not.
                    await conn.close()
                    raise
