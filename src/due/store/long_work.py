"""Long work in the database: checkpoints, pieces under a parent, batches, the
job's own transaction, and holding a parent's pieces (see pieces.py for how
a parent settles)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from due.core.records import BatchRequest, NewJob, PieceSpawn
from due.errors import JobCancelled, JobNotFoundError, LeaseLost
from due.store import pieces
from due.store.backend import Backend, Transaction
from due.store.conflicts import retried_on_conflict
from due.store.settling import lock_parents, settle
from due.store.sqlalchemy_connections import is_sqlalchemy, run_sync
from due.store.stats import count_endings


def save_checkpoint(
    db: Backend, job_id: int, token: int, value: str, connection: Any = None
) -> bool | None:
    """Save a running job's cursor (fenced): None if the lease is lost, else
    whether its cancellation was requested. On `connection`, inside the
    caller's open transaction (so it commits with the caller's writes)."""
    params = {"id": job_id, "token": token, "value": value}
    if connection is None:
        with db.transaction(single=True) as tx:
            rows = tx.run("save_checkpoint", params)
    else:
        with db.on_connection(connection, "ctx.checkpoint(..., connection=conn)") as tx:
            rows = tx.run("save_checkpoint", params)
    return bool(rows[0]["cancel_requested"]) if rows else None


async def save_checkpoint_async(
    db: Backend, job_id: int, token: int, value: str, connection: Any
) -> bool | None:
    """`save_checkpoint` on a caller's async connection (psycopg's
    AsyncConnection, or SQLAlchemy's AsyncConnection or AsyncSession)."""
    call = "await ctx.checkpoint(..., connection=conn)"
    if is_sqlalchemy(connection):
        work = functools.partial(save_checkpoint, db, job_id, token, value)
        return await run_sync(connection, call, work)
    async with db.on_async_connection(connection, call) as tx:
        rows = await tx.run("save_checkpoint", {"id": job_id, "token": token, "value": value})
    return bool(rows[0]["cancel_requested"]) if rows else None


@retried_on_conflict
def spawn(db: Backend, request: PieceSpawn) -> int | None:
    """Add pieces under a running parent (fenced), each known by its task and
    arguments (pieces.piece_keys): None if the parent's lease is lost, else how
    many were new. JobCancelled, nothing added, when the parent was asked to
    stop (read on its row: the worker may not have heard yet)."""
    with db.transaction(unbounded=True) as tx:
        params = {
            "parent": request.parent,
            "token": request.lease_token,
            "on_complete": request.on_complete,
            "on_piece_failure": request.on_piece_failure,
        }
        rows = tx.run("add_pieces", params)
        if not rows:
            return None  # the parent's lease is lost: add nothing
        if rows[0]["cancel_requested"]:  # (rolled back: its policy is not changed either)
            raise JobCancelled(f"job {request.parent} was asked to stop: no piece was added")
        added = _insert_pieces(tx, request.parent, request.jobs, bool(rows[0]["held"]))
        tx.run("count_new_pieces", {"parent": request.parent, "added": added})
        return added


@retried_on_conflict
def batch(db: Backend, request: BatchRequest) -> int:
    """A waiting parent with these pieces (outside any job); returns its id."""
    with db.transaction(unbounded=True) as tx:
        params = {
            "task": request.name,
            "queue": request.jobs[0].queue if request.jobs else "default",
            "total": len(request.jobs),
            "on_complete": request.on_complete,
            "on_piece_failure": request.on_piece_failure,
            "now": tx.now,
        }
        parent = int(tx.run("insert_batch_parent", params)[0]["id"])
        _insert_pieces(tx, parent, request.jobs, False)
        if not request.jobs:
            settle(tx, [{"id": parent, "state": "waiting"}])
        return parent


def _insert_pieces(tx: Transaction, parent: int, jobs: Sequence[NewJob], held: bool) -> int:
    """Insert the pieces not spawned before; how many were new."""
    if not jobs:
        return 0
    rows = [
        {
            "task": job.task,
            "queue": job.queue,
            "priority": job.priority,
            "payload": job.payload,
            "max_attempts": job.max_attempts,
            "stuck_after": job.stuck_after,
            "piece_key": key,
            "limits": job.limits,
        }
        for job, key in zip(jobs, pieces.piece_keys(jobs), strict=True)
    ]
    params = {"parent": parent, "held": held, "now": tx.now}
    return len(tx.run_each("insert_pieces", rows, params))


@contextlib.contextmanager
def job_transaction(db: Backend, job_id: int, token: int, progress: str | None) -> Iterator[Any]:
    """A transaction on the job's database, given to the handler as a connection,
    whose commit also records the job's success, fenced (LeaseLost rolls it all
    back, the handler's writes too)."""
    with db.handler_transaction() as (connection, tx):
        yield connection
        _complete(tx, job_id, token, progress)


def _complete(tx: Transaction, job_id: int, token: int, progress: str | None) -> None:
    lock_parents(tx, [job_id])  # parents first
    params = {"id": job_id, "token": token, "progress": progress, "now": tx.now}
    rows = tx.run("complete_in_transaction", params)
    if not rows:
        raise LeaseLost(f"job {job_id} lost its lease: its transaction is undone")
    if rows[0]["cancel_requested"]:  # a stop asked for is a stop: none of it is kept
        raise JobCancelled(f"job {job_id} was asked to stop: its transaction is undone")
    count_endings(tx, rows)
    settle(tx, [{**rows[0], "state": "succeeded"}])


def complete_on_connection(
    db: Backend, job_id: int, token: int, progress: str | None, connection: Any
) -> None:
    """Record a running job's success (fenced) in the caller's own open
    transaction, to commit with the caller's writes (`ctx.transaction(conn)`).
    LeaseLost and JobCancelled leave nothing of it in that transaction."""
    call = "ctx.transaction(connection)"
    with db.on_connection(connection, call, atomic=True) as tx:
        _complete(tx, job_id, token, progress)


@retried_on_conflict
def hold_group(db: Backend, parent: int, held: bool) -> None:
    """Pause or resume a parent's queued pieces (and those it adds later)."""
    with db.transaction() as tx:
        if not tx.run("hold_group", {"parent": parent, "held": held}):
            raise JobNotFoundError(f"no job with id {parent}")
