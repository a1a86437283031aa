"""A single enqueue's wake-up, sent apart from the job's commit.

A job's wake-up is a NOTIFY. At commit PostgreSQL takes one lock for all of
the server's notifications and holds it until the commit has been flushed to
disk, so transactions that notify commit one after another, each waiting for
its own flush, never several in one (bench/notify_cost.py). Several web server
processes enqueueing single jobs met there: 8 made barely more jobs a second
than one (bench/web_enqueue.py, bench/NOTES.md).

So an enqueue in a transaction of its own (`single`: one autocommitted
statement) is sent as two transactions in one round trip, pipelined: the job's
row, committed and flushed like any other commit (taking no lock on
notifications, so commits of several sessions share a flush), then its
wake-up (`wake_inserted_job`) in a transaction whose commit does not wait for
a flush: it holds the notification lock for microseconds. What a worker and
the caller see is what they saw:

- the wake-up is sent after the job is committed, and before `enqueue`
  returns, so an idle worker hears it as soon as it would have, and never
  before the job is there to claim;
- the enqueue returns only once the job's commit is flushed (durable);
- an enqueue that fails wrote nothing and woke nobody (the pipeline stops at
  the first error, and its transaction rolls back);
- a wake-up that fails once the job is committed (the notification queue
  full) does not fail the enqueue: the job is there, and workers also poll.
  A crash loses no wake-up a worker could hear: it loses their connections.

Enqueues inside a transaction (a key to settle, a caller's connection) keep
the notification in their statement: it is delivered at their commit, which
is the caller's to make.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import psycopg

from due.logs import event

log = logging.getLogger("due.store")
TRANSACTION_LEFT_OPEN = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)


def insert_woken_apart(
    cursor: psycopg.Cursor[Any], queries: Mapping[str, str], params: Mapping[str, Any]
) -> None:
    """Run `insert_job_unwoken` in a transaction of its own, then its wake-up in
    another; the cursor holds the insert's rows. Raises as `insert_job` would
    for anything but a failed wake-up of a committed job."""
    connection = cursor.connection
    committed: psycopg.Cursor[Any] | None = None
    try:
        with connection.pipeline():
            connection.execute("BEGIN")  # explicit: a COMMIT of the implicit one warns
            cursor.execute(queries["insert_job_unwoken"], params)
            committed = connection.execute("COMMIT")
            connection.execute(queries["wake_inserted_job"])
    except BaseException as error:
        if connection.info.transaction_status in TRANSACTION_LEFT_OPEN:
            # The insert failed or was cancelled inside its BEGIN: end it here, not
            # on the session's next use (an autocommitted session is never in one).
            with contextlib.suppress(psycopg.Error):
                connection.execute("ROLLBACK")
        if not isinstance(error, psycopg.Error) or not _committed(committed):
            raise
        event(log, "store.wakeup_failed", logging.WARNING, error=str(error))


async def insert_woken_apart_async(
    cursor: psycopg.AsyncCursor[Any], queries: Mapping[str, str], params: Mapping[str, Any]
) -> None:
    """`insert_woken_apart` from an event loop (`await task.aenqueue`, on the
    store's connection of the loop)."""
    connection = cursor.connection
    committed: psycopg.AsyncCursor[Any] | None = None
    try:
        async with connection.pipeline():
            await connection.execute("BEGIN")
            await cursor.execute(queries["insert_job_unwoken"], params)
            committed = await connection.execute("COMMIT")
            await connection.execute(queries["wake_inserted_job"])
    except BaseException as error:
        if connection.info.transaction_status in TRANSACTION_LEFT_OPEN:
            with contextlib.suppress(psycopg.Error):  # (a cancelled caller's too)
                await connection.execute("ROLLBACK")
        if not isinstance(error, psycopg.Error) or not _committed(committed):
            raise
        event(log, "store.wakeup_failed", logging.WARNING, error=str(error))


def _committed(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any] | None) -> bool:
    """Whether the job's COMMIT went through (its result came back)."""
    return cursor is not None and cursor.statusmessage == "COMMIT"
