"""Jobs from the outside: enqueue, look up, list, cancel, retry, prune.

Written once for both backends over `backend.Backend`; the statements are
the backend's, by name.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

from due.core.jobs import Job, JobState
from due.core.records import RETRY_RULE, JobFilter, NewJob, Retention, job_from_row, refusal
from due.errors import JobNotFoundError
from due.store import pieces, steps, workflows
from due.store.backend import Backend, DuplicateError, StatementRefused, Transaction
from due.store.conflicts import retried_on_conflict
from due.store.settling import lock_parents, settle
from due.store.sqlalchemy_connections import is_sqlalchemy, run_sync
from due.store.stats import count_endings


def enqueue(db: Backend, jobs: Sequence[NewJob], connection: Any = None) -> list[Job]:
    """Insert jobs (deduplicating on keys); on `connection`, inside its transaction."""
    if not jobs:
        return []
    if connection is not None:
        # Several jobs are several statements: kept all or none, whatever the
        # caller's transaction (or autocommit) does with the others.
        atomic = len(jobs) > 1
        with db.on_connection(connection, "enqueue(connection=...)", atomic=atomic) as tx:
            return steps.carry_out(tx, steps.enqueue_steps(jobs, tx.now))
    # One job without a key is one statement: no BEGIN/COMMIT round trips.
    single = len(jobs) == 1 and jobs[0].key is None
    with db.transaction(single=single, unbounded=len(jobs) > steps.BULK_CHUNK) as tx:
        return steps.carry_out(tx, steps.enqueue_steps(jobs, tx.now))


async def enqueue_together(
    db: Backend, jobs: Sequence[NewJob]
) -> list[Job | StatementRefused] | None:
    """One-job enqueues without keys (enqueue_groups.py) written together. On
    PostgreSQL, one autocommitted statement on the store's connection of the
    running loop, without a thread; None when there is none to use (the loop's
    first enqueue, the store closed): take a thread. On SQLite, which writes
    one transaction at a time whatever the threads, one transaction on a
    thread: one commit, one fsync, for the group. Each request's job, or, for
    a row the statement committed without (a trigger of the user's skipped
    it), the error its caller gets."""
    if db.single_writer:
        return [*await asyncio.to_thread(enqueue, db, jobs)]
    async with db.loop_statement() as tx:
        if tx is None:
            return None
        if len(jobs) == 1:
            return [*await steps.carry_out_async(tx, steps.enqueue_steps(jobs, tx.now))]
        rows = await tx.run_each("insert_grouped_jobs", steps.grouped_rows(jobs), {"now": tx.now})
    return _grouped(jobs, rows)


def enqueue_grouped(db: Backend, jobs: Sequence[NewJob]) -> list[Job | StatementRefused]:
    """One-job enqueues without keys made side by side by threads
    (thread_groups.py), written together: on PostgreSQL one autocommitted
    statement, on SQLite one transaction. Each request's job, or the error its
    caller gets; StatementRefused when the group was refused, nothing written."""
    if db.single_writer or len(jobs) == 1:
        return [*enqueue(db, jobs)]
    with db.transaction(single=True) as tx:
        rows = tx.run_each("insert_grouped_jobs", steps.grouped_rows(jobs), {"now": tx.now})
    return _grouped(jobs, rows)


def _grouped(jobs: Sequence[NewJob], rows: Sequence[Any]) -> list[Job | StatementRefused]:
    """Each request's job from insert_grouped_jobs' rows, or the error of one
    the statement committed without."""
    by_request = {row["ord"]: row for row in rows}  # ord counts the requests from 1
    created: list[Job | StatementRefused] = []
    for n, job in enumerate(jobs, 1):
        row = by_request.get(n)
        if row is None:
            created.append(steps.not_stored(job))
        else:
            created.append(steps.new_job(job, row["id"], row["run_at"], row["created_at"]))
    return created


async def enqueue_async(db: Backend, jobs: Sequence[NewJob], connection: Any) -> list[Job]:
    """`enqueue` on a caller's async connection (psycopg's AsyncConnection, or
    SQLAlchemy's AsyncConnection or AsyncSession: through its bridge to sync)."""
    call = "aenqueue(connection=...)"
    if is_sqlalchemy(connection):
        return await run_sync(connection, call, lambda lent: enqueue(db, jobs, lent))
    async with db.on_async_connection(connection, call, atomic=len(jobs) > 1) as tx:
        return await steps.carry_out_async(tx, steps.enqueue_steps(jobs, tx.now))


def get(db: Backend, job_id: int, connection: Any = None) -> Job:
    """The job; on `connection`, as the caller's transaction sees it (its own
    enqueues not yet committed included)."""
    if connection is not None:
        with db.on_connection(connection, "get(connection=...)") as tx:
            rows = tx.run("get_job", {"id": job_id, "now": tx.now})
    else:
        with db.transaction(read=True) as tx:
            rows = tx.run("get_job", {"id": job_id, "now": tx.now})
    if not rows:
        raise JobNotFoundError(f"no job with id {job_id}")
    return job_from_row(rows[0])


def ended(db: Backend, job_ids: Sequence[int]) -> list[Job]:
    """Those of these jobs that have ended (succeeded, failed or cancelled)."""
    with db.transaction(read=True) as tx:
        rows = tx.run("ended_jobs", {"ids": list(job_ids)})
    return [job_from_row(row) for row in rows]


LISTED_APART = {
    JobState.RUNNING: "list_running_jobs",
    JobState.WAITING: "list_stopped_jobs",
    JobState.FAILED: "list_stopped_jobs",
}
"""States few of the jobs kept are in: listed newest first through an index of
their own, not back through every newer job."""


def filter_params(where: JobFilter) -> dict[str, object]:
    """The filter's parameters, as list_jobs and the bulk counts take them."""
    return {
        "queue": where.queue,
        "state": where.state.value if where.state else None,
        "task": where.task,
        "parent": where.parent,
        "key": where.key,
        "before": where.before,
        "since": where.since,
        "until": where.until,
        "error_contains": where.error_contains,
        "key_prefix": where.key_prefix,
        "workflow": where.workflow,
        "args_contains": where.args_contains,
        "hidden_positions": where.hidden_positions,
    }


def list_jobs(db: Backend, where: JobFilter) -> list[Job]:
    """Jobs matching the filter, newest first."""
    query = "list_jobs" if where.state is None else LISTED_APART.get(where.state, "list_jobs")
    with db.transaction(read=True) as tx:
        rows = tx.run(
            query,
            {
                **filter_params(where),
                "limit": where.limit,
                "stuck_only": where.stuck_only,
                "now": tx.now,
            },
        )
    return [job_from_row(row) for row in rows]


@retried_on_conflict
def cancel(db: Backend, job_id: int) -> Job:
    """A queued job ends at once; a running one is asked (it ends at its next safe
    point); a waiting parent ends with its unfinished pieces."""
    with db.transaction() as tx:
        lock_parents(tx, [job_id])
        cancel_in(tx, job_id)
    job = get(db, job_id)
    if job.state in (JobState.CANCELLED, JobState.RUNNING) or job.cancel_requested:
        return job
    raise refusal(job, "cancel", "a job that has ended cannot be cancelled")


def cancel_in(tx: Transaction, job_id: int) -> bool:
    """`cancel`'s work in `tx`, its parents locked: whether the job was
    cancelled or asked to stop (False: it had ended, or cannot be cancelled)."""
    cancelled = tx.run("cancel_job", {"id": job_id, "now": tx.now})
    if cancelled:
        count_endings(tx, cancelled)
        settle(tx, cancelled)
        return True
    if tx.run("request_cancel", {"id": job_id}):
        return True
    return _cancel_waiting_parent(tx, job_id)


def _cancel_waiting_parent(tx: Transaction, job_id: int) -> bool:
    """A waiting job ends, with its unfinished pieces; a waiting step of a
    workflow is counted on its workflow and on the steps after it."""
    rows = tx.run("parent_counts", {"parent": job_id})
    if not rows or rows[0]["state"] != "waiting":
        return False
    ended: list[dict[str, Any]] = []

    def counted(rows: list[dict[str, Any]]) -> None:
        count_endings(tx, rows)
        ended.extend(rows)

    error = "cancelled on request"
    pieces.finish(tx.run, job_id, "cancelled", "null", error, tx.instant(), counted)
    if workflows.ended_steps(ended):
        workflows.release(tx, ended, functools.partial(count_endings, tx))
    return True


@retried_on_conflict
def retry(db: Backend, job_id: int, run_now: bool = False) -> Job:
    """Queue a failed or cancelled job again, with a fresh set of attempts: due
    now, or at its own run_at while that is still to come (unless run_now).

    A workflow's step is retried with its workflow (`workflows.retry`, as bulk
    retries do): the steps after it, cancelled when it failed, run again after
    it, and the workflow's counts take back their ends. Retried alone, it would run
    while the steps after it stayed cancelled and its workflow stayed ended."""
    job = get(db, job_id)
    if job.workflow_id is not None and job.state in (JobState.FAILED, JobState.CANCELLED):
        workflows.retry(db, job.workflow_id)
        job = get(db, job_id)
        if job.state in (JobState.QUEUED, JobState.WAITING):
            return job
        raise refusal(job, "retry", RETRY_RULE)
    try:
        with db.transaction() as tx:
            # Its parent first (one lock order), and so the parent cannot settle or
            # be cancelled between the check and the recount.
            lock_parents(tx, [job_id])
            retried = steps.carry_out(tx, steps.retry_steps(job_id, run_now, tx.now))
    except DuplicateError:
        # Its key was taken between the check and the update: refused, as then.
        return retry(db, job_id, run_now)
    if retried is not None:
        return retried
    raise refusal(get(db, job_id), "retry", RETRY_RULE)


def prune(db: Backend, retention: Retention, limit: int = 10_000) -> tuple[int, int]:
    """Delete finished jobs older than their outcome's retention (never the newest
    job, nor one whose key still deduplicates), ended workflows whole with their
    steps (workflows.prune), and schedule runs, actions and worker processes
    unseen for longer than the longer retention; returns (jobs, runs) deleted,
    about `limit` of each at most (a workflow's steps all go together)."""
    with db.transaction() as tx:
        params = {
            "retention_succeeded": float(retention.succeeded),
            "retention_failed": float(retention.failed),
            "retention": float(max(retention.succeeded, retention.failed)),
            "limit": limit,
            "now": tx.now,
        }
        jobs = len(tx.run("prune_jobs", params))
        jobs += workflows.prune(tx, params)
        runs = tx.run("prune_schedule_runs", params)
        tx.run("prune_actions", params)
        tx.run("prune_workers", params)
    return jobs, len(runs)


VACUUM_DEAD_ROWS = 10_000
VACUUM_DEAD_SHARE = 0.10


def vacuum_if_needed(db: Backend) -> dict[str, Any] | None:
    """Vacuum the job table when its dead row versions pass 10,000 and a tenth of
    its live rows: the counts before and after (`dead`, `dead_after`) when it
    did, None otherwise (and always on SQLite, which reuses a deleted row's space
    without a vacuum).

    Every job is inserted, updated twice and deleted: on PostgreSQL each leaves
    a dead row version in the table and in the claim index, which every claim
    walks past until a vacuum clears it. The table's settings ask autovacuum to
    run often (migration 0009), but a server may run it rarely or not at all
    (`autovacuum = off`): at 1,000 jobs/s claim latency grew from 2 ms to 16 ms
    within 90 s on such a server. This is the fallback, run by the leader. The
    vacuum has no statement limit: it takes as long as the table needs."""
    if not db.leaves_dead_rows:
        return None
    health = _table_health(db)
    if health is None:
        return None
    live, dead = health
    if dead < max(VACUUM_DEAD_ROWS, VACUUM_DEAD_SHARE * live):
        return None
    with db.transaction(single=True, unbounded=True) as tx:
        tx.run("vacuum_jobs")
    after = _table_health(db)
    return {"live": live, "dead": dead, "dead_after": after[1] if after else None}


def _table_health(db: Backend) -> tuple[int, int] | None:
    """(live, dead) row versions of the job table, as the server counts them."""
    with db.transaction(read=True) as tx:
        rows = tx.run("job_table_health")
    if not rows:
        return None
    return int(rows[0]["live"] or 0), int(rows[0]["dead"] or 0)
