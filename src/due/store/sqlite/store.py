"""The SQLite store: the embedded default, one host, any number of processes.

This module holds the jobs' part and assembles the store (see base.py).

Durability first: WAL with `synchronous=FULL`, because an acknowledged
enqueue is a promise (a power cut must not take it back). Every writing
transaction is `BEGIN IMMEDIATE`, so writers queue on SQLite's single write
lock (bounded by `busy_timeout`) instead of failing halfway; claims are
therefore serialised and no row is ever claimed twice.

Each thread gets its own connection (sqlite3 connections are not shared
across threads); times are stored as REAL Unix seconds and "now" is this
host's clock unless a clock is injected.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Generator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from due.core.jobs import AttemptError, Job, JobState
from due.core.records import (
    RETRY_RULE,
    ClaimedJob,
    Completion,
    HeartbeatReply,
    JobFilter,
    Lease,
    NewJob,
    RescueResult,
    attempt_error_json,
    job_from_row,
    read_claimed,
    refusal,
)
from due.errors import (
    ConfigurationError,
    JobNotFoundError,
    StoreError,
)
from due.retry import judge_lost_lease
from due.store import batches, pieces, steps
from due.store.protocol import DEFAULT_ALIVE_SECONDS, DEFAULT_MAX_LOST_LEASES
from due.store.sql import describe_seconds
from due.store.sqlite.base import (
    QUERIES,
    epoch,
    piece_queries,
    python_row,
    settle,
    to_datetime,
    translate_errors,
)
from due.store.sqlite.schedules import SQLiteSchedules
from due.store.sqlite.work import SQLiteWork
from due.store.sqlite.workers import SQLiteWorkers

T = TypeVar("T")


class SQLiteStore(SQLiteWork, SQLiteSchedules, SQLiteWorkers):
    """Jobs: enqueue, claim, heartbeat, complete, rescue, inspect."""

    # --- producers ------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Job]:
        if not jobs:
            return []
        if connection is None and not any(job.key for job in jobs):
            return self._enqueue_batch(jobs)
        plan = steps.enqueue_steps(jobs, self._now(), time_param=epoch)
        if connection is not None:
            if not isinstance(connection, sqlite3.Connection):
                raise ConfigurationError(
                    "enqueue(connection=...) takes a sqlite3.Connection for a SQLite app, "
                    f"got {type(connection).__name__}"
                )
            with translate_errors(self.path):
                return _run(connection, plan)
        with self._write() as conn:
            return _run(conn, plan)

    def _enqueue_batch(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Jobs without keys: nothing to deduplicate, one (executemany) insert."""
        now = self._now()
        run_ats = [job.run_at.timestamp() if job.run_at else now + job.delay for job in jobs]
        rows = [
            {
                "task": job.task,
                "queue": job.queue,
                "priority": job.priority,
                "payload": job.payload,
                "run_at": run_at,
                "max_attempts": job.max_attempts,
                "unique_for": job.unique_for,
                "stuck_after": job.stuck_after,
                "now": now,
            }
            for job, run_at in zip(jobs, run_ats, strict=True)
        ]
        with self._write() as conn:
            if len(rows) == 1:
                first = int(conn.execute(QUERIES["insert_jobs"], rows[0]).lastrowid or 0)
            else:
                conn.executemany(QUERIES["insert_jobs"], rows)
                last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
                first = last - len(jobs) + 1
                count = conn.execute(QUERIES["count_id_range"], {"first": first, "last": last})
                if count.fetchone()["n"] != len(jobs):
                    raise StoreError("batch ids were not consecutive; nothing was enqueued")
        created_at = to_datetime(now)
        return [
            steps.new_job(job, first + offset, to_datetime(run_at), created_at)
            for offset, (job, run_at) in enumerate(zip(jobs, run_ats, strict=True))
        ]

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[Job]:
        raise ConfigurationError(
            "a SQLite app has no async connections; call task.enqueue(..., connection=conn) "
            "with a sqlite3.Connection"
        )

    # --- workers ----------------------------------------------------------------

    def claim(
        self,
        queue: str,
        limit: int,
        worker: str,
        lease_seconds: float,
        tasks: Sequence[str] | None = None,
        task_leases: Mapping[str, float] | None = None,
    ) -> list[ClaimedJob]:
        params = self._claim_params(queue, limit, worker, lease_seconds, tasks, task_leases)
        with self._write() as conn:
            rows = conn.execute(QUERIES["claim_jobs"], params).fetchall()
        return self._readable(rows)

    def _claim_params(
        self,
        queue: str,
        limit: int,
        worker: str,
        lease_seconds: float,
        tasks: Sequence[str] | None,
        task_leases: Mapping[str, float] | None,
    ) -> dict[str, Any]:
        return {
            "queue": queue,
            "limit": limit,
            "worker": worker,
            "lease": float(lease_seconds),
            "leases": json.dumps(dict(task_leases or {})),
            "tasks": json.dumps(list(tasks)) if tasks is not None else None,
            "now": self._now(),
        }

    def complete_and_claim(
        self,
        completions: Sequence[Completion],
        queue: str,
        limit: int,
        worker: str,
        lease_seconds: float,
        tasks: Sequence[str] | None = None,
        task_leases: Mapping[str, float] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        """Both in one write transaction: one commit (one fsync) instead of two; if the
        database refuses an acknowledgement, they are written apart (one bad row
        must not stop the claims, nor the other acknowledgements)."""
        params = self._claim_params(queue, limit, worker, lease_seconds, tasks, task_leases)
        try:
            with self._write() as conn:
                applied = self._complete_in(conn, completions, params["now"])
                rows = conn.execute(QUERIES["claim_jobs"], params).fetchall()
        except StoreError as error:
            if not completions or not batches.refused(error):
                raise
            applied = self.complete(completions)
            return applied, self.claim(queue, limit, worker, lease_seconds, tasks, task_leases)
        return applied, self._readable(rows)

    def _readable(self, rows: list[sqlite3.Row]) -> list[ClaimedJob]:
        """The claimed jobs; those whose stored values cannot be read are failed."""
        claimed, unreadable = read_claimed([dict(row) for row in rows], python_row)
        if unreadable:
            self.complete(unreadable)
        return claimed

    def heartbeat(self, leases: Sequence[Lease]) -> HeartbeatReply:
        if not leases:
            return HeartbeatReply(frozenset(), frozenset())
        return batches.heartbeat_each(self._heartbeat_batch, leases)

    def _heartbeat_batch(self, leases: Sequence[Lease]) -> HeartbeatReply:
        now = self._now()
        extended, cancel = set(), set()
        with self._write() as conn:
            for lease in leases:
                params = {
                    "id": lease.job_id,
                    "token": lease.lease_token,
                    "lease": float(lease.lease_seconds),
                    "progress": lease.progress,
                    "now": now,
                }
                row = conn.execute(QUERIES["heartbeat"], params).fetchone()
                if row:
                    extended.add(lease.job_id)
                    if row["cancel_requested"]:
                        cancel.add(lease.job_id)
        lost = {lease.job_id for lease in leases} - extended
        return HeartbeatReply(frozenset(extended), frozenset(lost), frozenset(cancel))

    def complete(self, completions: Sequence[Completion]) -> set[int]:
        if not completions:
            return set()
        return batches.complete_each(self._complete_batch, completions)

    def _complete_batch(self, completions: Sequence[Completion]) -> set[int]:
        with self._write() as conn:
            return self._complete_in(conn, completions, self._now())

    def _complete_in(
        self, conn: sqlite3.Connection, completions: Sequence[Completion], now: float
    ) -> set[int]:
        applied, ended = set(), []
        for completion in completions:
            params = {
                "id": completion.job_id,
                "token": completion.lease_token,
                "state": completion.state.value,
                "result": completion.result,
                "error": completion.error_json(),
                "retry_in": completion.retry_in,
                "progress": completion.progress,
                "now": now,
            }
            row = conn.execute(QUERIES["complete_jobs"], params).fetchone()
            if row:
                applied.add(completion.job_id)
                ended.append(dict(row))
        settle(conn, ended, now)
        return applied

    def rescue(
        self, limit: int = 1000, max_lost_leases: int = DEFAULT_MAX_LOST_LEASES
    ) -> RescueResult:
        now = self._now()
        outcomes: dict[str, list[int]] = {"queued": [], "failed": [], "cancelled": []}
        if not self._read("any_expired", {"now": now}):
            return RescueResult()  # the common case, without taking the write lock
        ended: list[dict[str, Any]] = []
        with self._write() as conn:
            expired = conn.execute(QUERIES["select_expired"], {"limit": limit, "now": now})
            for row in expired.fetchall():
                verdict = judge_lost_lease(
                    attempt=row["attempt"],
                    max_attempts=row["max_attempts"],
                    lost_leases=row["lost_leases"],
                    worker=row["worker"],
                    max_lost_leases=max_lost_leases,
                )
                error = AttemptError(
                    row["attempt"], verdict.reason, None, to_datetime(now), "lease_lost"
                )
                params = {
                    "id": row["id"],
                    "gives_up": verdict.gives_up,
                    "error": attempt_error_json(error),
                    "now": now,
                }
                for rescued in conn.execute(QUERIES["rescue_jobs"], params):
                    ended.append(dict(rescued))
                    outcomes[rescued["state"]].append(rescued["id"])
            settle(conn, ended, now)
        return RescueResult(
            requeued=tuple(outcomes["queued"]),
            failed=tuple(outcomes["failed"]),
            cancelled=tuple(outcomes["cancelled"]),
        )

    def release(self, leases: Sequence[Lease], reason: str) -> set[int]:
        if not leases:
            return set()
        now = self._now()
        released = set()
        with self._write() as conn:
            for lease in leases:
                params = {
                    "id": lease.job_id,
                    "token": lease.lease_token,
                    "reason": reason,
                    "now": now,
                    "now_iso": to_datetime(now).isoformat(),
                }
                row = conn.execute(QUERIES["release_jobs"], params).fetchone()
                if row:
                    released.add(lease.job_id)
                    if row["state"] != "queued":  # asked to stop: cancelled, not handed back
                        settle(conn, [dict(row)], now)
        return released

    def next_due(self, queue: str, tasks: Sequence[str]) -> datetime | None:
        rows = self._read("next_due", {"queue": queue, "tasks": json.dumps(list(tasks))})
        value = rows[0]["run_at"]
        return to_datetime(value) if value is not None else None

    def fail_unknown_tasks(
        self,
        queues: Sequence[str],
        tasks: Sequence[str],
        grace_seconds: float,
        alive_seconds: float = DEFAULT_ALIVE_SECONDS,
    ) -> list[int]:
        now = self._now()
        params = {
            "queues": json.dumps(list(queues)),
            "tasks": json.dumps(list(tasks)),
            "grace": float(grace_seconds),
            "grace_text": describe_seconds(grace_seconds),
            "alive": float(alive_seconds),
            "now": now,
            "now_iso": to_datetime(now).isoformat(),
        }
        with self._write() as conn:
            rows = [dict(row) for row in conn.execute(QUERIES["fail_unknown_tasks"], params)]
            settle(conn, rows, now)  # a piece failed here still counts on its parent
        return [row["id"] for row in rows]

    # --- inspection and control ---------------------------------------------------

    def get(self, job_id: int) -> Job:
        rows = self._read("get_job", {"id": job_id, "now": self._now()})
        if not rows:
            raise JobNotFoundError(f"no job with id {job_id}")
        return job_from_row(python_row(rows[0]))

    def ended_jobs(self, job_ids: Sequence[int]) -> list[Job]:
        rows = self._read("ended_jobs", {"ids": json.dumps(list(job_ids))})
        return [job_from_row(python_row(row)) for row in rows]

    def list_jobs(self, where: JobFilter) -> list[Job]:
        rows = self._read(
            "list_jobs",
            {
                "queue": where.queue,
                "state": where.state.value if where.state else None,
                "task": where.task,
                "limit": where.limit,
                "parent": where.parent,
                "stuck_only": where.stuck_only,
                "now": self._now(),
            },
        )
        return [job_from_row(python_row(row)) for row in rows]

    def cancel(self, job_id: int) -> Job:
        """A queued job ends at once; a running one is asked (it ends at its next safe
        point); a waiting parent ends with its unfinished pieces."""
        now = self._now()
        with self._write() as conn:
            cancelled = [
                dict(r) for r in conn.execute(QUERIES["cancel_job"], {"id": job_id, "now": now})
            ]
            if cancelled:
                settle(conn, cancelled, now)
            elif not conn.execute(QUERIES["request_cancel"], {"id": job_id}).fetchall():
                parent = conn.execute(QUERIES["parent_counts"], {"parent": job_id}).fetchone()
                if parent is not None and parent["state"] == "waiting":
                    error = "cancelled on request"
                    pieces.finish(piece_queries(conn), job_id, "cancelled", "null", error, now)
        job = self.get(job_id)
        if job.state in (JobState.CANCELLED, JobState.RUNNING) or job.cancel_requested:
            return job
        raise refusal(job, "cancel", "a job that has ended cannot be cancelled")

    def retry(self, job_id: int, run_now: bool = False) -> Job:
        with self._write() as conn:  # BEGIN IMMEDIATE: no key can be taken meanwhile
            job = _run(conn, steps.retry_steps(job_id, run_now, self._now()))
        if job is not None:
            return job
        raise refusal(self.get(job_id), "retry", RETRY_RULE)

    def prune(self, retention_seconds: float, limit: int = 10_000) -> tuple[int, int]:
        params = {"retention": float(retention_seconds), "limit": limit, "now": self._now()}
        with self._write() as conn:
            jobs = conn.execute(QUERIES["prune_jobs"], params).fetchall()
            runs = conn.execute(QUERIES["prune_schedule_runs"], params).fetchall()
        return len(jobs), len(runs)

    def due_queues(self) -> list[str]:
        return [row["queue"] for row in self._read("due_queues", {"now": self._now()})]


def _run(conn: sqlite3.Connection, plan: Generator[steps.Step, steps.Rows, T]) -> T:
    """Carry out a plan (store/steps.py) on a connection, inside its transaction."""
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row  # a caller's connection may have any row factory
    step = next(plan)
    while True:
        cursor.execute(QUERIES[step.query], step.params)
        rows = [python_row(dict(row)) for row in cursor.fetchall()] if cursor.description else []
        try:
            step = plan.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result
