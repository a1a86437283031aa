"""The PostgreSQL store: many hosts, one database, psycopg 3 with a pool.

This module holds the jobs' part (and assembles the whole store); the pool,
workers, and schedules live beside it in base.py, workers.py, schedules.py.

Claims use `FOR UPDATE SKIP LOCKED` on a partial index of queued rows;
batches of heartbeats and completions are one statement each (arrays through
`unnest`); every statement that makes a job claimable sends a NOTIFY in the
same transaction, so it is delivered exactly when the job becomes visible.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

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
from due.errors import JobNotFoundError, StoreError, StoreUnavailableError
from due.retry import judge_lost_lease
from due.store import batches, pieces, steps
from due.store.postgres.base import (
    QUERIES,
    atranslate_errors,
    normalise,
    normalise_rows,
    piece_queries,
    require_async_connection,
    require_sync_connection,
    retried_on_conflict,
    returns_rows,
    translate_errors,
    utc,
)
from due.store.postgres.schedules import PostgresSchedules
from due.store.postgres.work import PostgresWork
from due.store.postgres.workers import PostgresWorkers
from due.store.protocol import DEFAULT_ALIVE_SECONDS, DEFAULT_MAX_LOST_LEASES
from due.store.sql import describe_seconds

T = TypeVar("T")
BULK_CHUNK = 5000
# The columns of copy_jobs, in order.
COPY_TYPES = [
    "int8",
    "text",
    "text",
    "int4",
    "jsonb",
    "timestamptz",
    "int4",
    "text",
    "text",
    "float8",
    "timestamptz",
    "float8",
]


class PostgresStore(PostgresWork, PostgresSchedules, PostgresWorkers):
    """Jobs: enqueue, claim, heartbeat, complete, rescue, inspect (see the module doc)."""

    # --- producers ------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Job]:
        if not jobs:
            return []
        plan = steps.enqueue_steps(jobs, self._now(), chunk=BULK_CHUNK, json_column=_jsonb_text)
        if connection is not None:
            require_sync_connection(connection, "enqueue(connection=...)")
            with translate_errors(self.url), connection.cursor(row_factory=dict_row) as cur:
                return _run(cur, plan)
        # One job without a key is one autocommitted statement: no BEGIN/COMMIT trips.
        single = len(jobs) == 1 and jobs[0].key is None
        with self._cursor(transaction=not single) as cur:
            if len(jobs) > BULK_CHUNK:
                cur.execute(QUERIES["unbounded_transaction"])
            return _run(cur, plan)

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[Job]:
        require_async_connection(connection, "aenqueue(connection=...)")
        plan = steps.enqueue_steps(jobs, self._now(), chunk=BULK_CHUNK, json_column=_jsonb_text)
        async with (
            atranslate_errors(self.url),
            connection.cursor(row_factory=dict_row) as cur,
        ):
            step = next(plan)
            rows: list[dict[str, Any]]
            while True:
                if step.rows is not None:
                    async with cur.copy(QUERIES[step.query]) as copy:
                        copy.set_types(COPY_TYPES)
                        for row in step.rows:
                            await copy.write_row(row)
                    rows = []
                else:
                    await cur.execute(QUERIES[step.query], step.params)
                    rows = await cur.fetchall() if returns_rows(cur) else []
                try:
                    step = plan.send(normalise_rows(rows))
                except StopIteration as done:
                    return list(done.value)

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
        claimed, unreadable = read_claimed(self._all("claim_jobs", params))
        if unreadable:  # stored values that cannot be read fail their own job only
            self.complete(unreadable)
        return claimed

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
            "tasks": list(tasks) if tasks is not None else None,
            "now": self._now(),
        }

    def heartbeat(self, leases: Sequence[Lease]) -> HeartbeatReply:
        if not leases:
            return HeartbeatReply(frozenset(), frozenset())
        return batches.heartbeat_each(self._heartbeat_batch, leases)

    def _heartbeat_batch(self, leases: Sequence[Lease]) -> HeartbeatReply:
        """Renew every lease in one statement that skips rows another transaction
        holds, then those rows in a second one that waits for them briefly. A row
        still held after that (a handler's own open transaction on its job) is
        neither renewed nor lost this time."""
        rows = self._all("heartbeat", self._heartbeat_params(leases))
        answered = {row["id"] for row in rows}
        busy = [lease for lease in leases if lease.job_id not in answered]
        lost = set()
        if busy:
            waited = self._heartbeat_busy(busy)
            if waited is not None:
                rows += waited
                found = {row["id"] for row in waited}
                lost = {lease.job_id for lease in busy if lease.job_id not in found}  # gone
        extended = frozenset(row["id"] for row in rows if row["renewed"])
        lost |= {row["id"] for row in rows if not row["renewed"]}
        cancel = frozenset(row["id"] for row in rows if row["cancel_requested"])
        return HeartbeatReply(extended, frozenset(lost), cancel)

    def _heartbeat_busy(self, busy: Sequence[Lease]) -> list[dict[str, Any]] | None:
        try:
            with self._cursor(transaction=True) as cur:
                cur.execute(QUERIES["bound_lock_wait"])
                cur.execute(QUERIES["heartbeat_waiting"], self._heartbeat_params(busy))
                return cur.fetchall()
        except StoreUnavailableError as error:
            if isinstance(error.__cause__, psycopg.errors.LockNotAvailable):
                return None  # still held: try again at the next beat
            raise

    def _heartbeat_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {
            "ids": [lease.job_id for lease in leases],
            "tokens": [lease.lease_token for lease in leases],
            "leases": [float(lease.lease_seconds) for lease in leases],
            "progresses": [lease.progress for lease in leases],
            "now": self._now(),
        }

    def complete(self, completions: Sequence[Completion]) -> set[int]:
        if not completions:
            return set()
        return batches.complete_each(self._complete_batch, completions)

    @retried_on_conflict
    def _complete_batch(self, completions: Sequence[Completion]) -> set[int]:
        if not any(c.settles for c in completions):
            # The common case: one autocommitted statement.
            rows = self._all("complete_jobs", self._completion_params(completions))
            return {row["id"] for row in rows}
        with self._cursor(transaction=True) as cur:
            settling = [c.job_id for c in completions if c.settles]
            cur.execute(QUERIES["lock_parents"], {"ids": settling})
            cur.execute(QUERIES["complete_jobs"], self._completion_params(completions))
            rows = cur.fetchall()
            self._settle(cur, rows)
        return {row["id"] for row in rows}

    def _completion_params(self, completions: Sequence[Completion]) -> dict[str, Any]:
        return {
            "ids": [c.job_id for c in completions],
            "tokens": [c.lease_token for c in completions],
            "states": [c.state.value for c in completions],
            "results": [c.result for c in completions],
            "errors": [c.error_json() for c in completions],
            "retry_ins": [c.retry_in for c in completions],
            "progresses": [c.progress for c in completions],
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
        # The worker writes acknowledgements apart from claims here (carrying them in
        # claims made drains slower: bench/README.md), so no shared transaction.
        applied = self.complete(completions)
        return applied, self.claim(queue, limit, worker, lease_seconds, tasks, task_leases)

    @retried_on_conflict
    def rescue(
        self, limit: int = 1000, max_lost_leases: int = DEFAULT_MAX_LOST_LEASES
    ) -> RescueResult:
        now = self._now()
        if not self._all("any_expired", {"now": now}):
            return RescueResult()
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["select_expired"], {"limit": limit, "now": now})
            expired = cur.fetchall()
            if not expired:
                return RescueResult()
            at = now or self._fetch_now(cur)
            cur.execute(QUERIES["bound_rescue_locks"])
            expired = self._with_parents_locked(cur, expired)
            verdicts = [
                judge_lost_lease(
                    attempt=row["attempt"],
                    max_attempts=row["max_attempts"],
                    lost_leases=row["lost_leases"],
                    worker=row["worker"],
                    max_lost_leases=max_lost_leases,
                )
                for row in expired
            ]
            cur.execute(
                QUERIES["rescue_jobs"],
                {
                    "ids": [row["id"] for row in expired],
                    "tokens": [row["lease_token"] for row in expired],
                    "gives_up": [verdict.gives_up for verdict in verdicts],
                    "errors": [
                        attempt_error_json(
                            AttemptError(row["attempt"], verdict.reason, None, at, "lease_lost")
                        )
                        for row, verdict in zip(expired, verdicts, strict=True)
                    ],
                    "now": now,
                },
            )
            rows = cur.fetchall()
            self._settle(cur, rows)
        return RescueResult(
            requeued=tuple(row["id"] for row in rows if row["state"] == JobState.QUEUED),
            failed=tuple(row["id"] for row in rows if row["state"] == JobState.FAILED),
            cancelled=tuple(row["id"] for row in rows if row["state"] == JobState.CANCELLED),
        )

    @staticmethod
    def _with_parents_locked(
        cur: psycopg.Cursor[dict[str, Any]], expired: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The expired jobs whose parents this transaction could lock at once
        (parents first: the one lock order); the others wait for a later round."""
        children = [row["id"] for row in expired if row["parent_id"] or row["completes"]]
        if not children:
            return expired
        cur.execute(QUERIES["lock_parents_skip_locked"], {"ids": children})
        locked = {row["id"] for row in cur.fetchall()}
        return [
            row
            for row in expired
            if not (row["parent_id"] or row["completes"])
            or (row["parent_id"] or row["completes"]) in locked
        ]

    @retried_on_conflict
    def release(self, leases: Sequence[Lease], reason: str) -> set[int]:
        if not leases:
            return set()
        params = {
            "ids": [lease.job_id for lease in leases],
            "tokens": [lease.lease_token for lease in leases],
            "reason": reason,
            "now": self._now(),
        }
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["lock_parents"], {"ids": params["ids"]})
            cur.execute(QUERIES["release_jobs"], params)
            rows = cur.fetchall()
            self._settle(cur, [row for row in rows if row["state"] != "queued"])  # cancelled
        return {row["id"] for row in rows}

    def next_due(self, queue: str, tasks: Sequence[str]) -> datetime | None:
        rows = self._all("next_due", {"queue": queue, "tasks": list(tasks)})
        value = rows[0]["run_at"]
        return utc(value) if value is not None else None

    @retried_on_conflict
    def fail_unknown_tasks(
        self,
        queues: Sequence[str],
        tasks: Sequence[str],
        grace_seconds: float,
        alive_seconds: float = DEFAULT_ALIVE_SECONDS,
    ) -> list[int]:
        params = {
            "queues": list(queues),
            "tasks": list(tasks),
            "grace": float(grace_seconds),
            "grace_text": describe_seconds(grace_seconds),
            "alive": float(alive_seconds),
            "now": self._now(),
        }
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["fail_unknown_tasks"], params)
            rows = cur.fetchall()
            self._settle(cur, rows)  # a piece failed here still counts on its parent
        return [row["id"] for row in rows]

    # --- inspection and control ---------------------------------------------------

    def get(self, job_id: int) -> Job:
        rows = self._all("get_job", {"id": job_id, "now": self._now()})
        if not rows:
            raise JobNotFoundError(f"no job with id {job_id}")
        return job_from_row(normalise(rows[0]))

    def ended_jobs(self, job_ids: Sequence[int]) -> list[Job]:
        rows = self._all("ended_jobs", {"ids": list(job_ids)})
        return [job_from_row(normalise(row)) for row in rows]

    def list_jobs(self, where: JobFilter) -> list[Job]:
        rows = self._all(
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
        return [job_from_row(normalise(row)) for row in rows]

    @retried_on_conflict
    def cancel(self, job_id: int) -> Job:
        """A queued job ends at once; a running one is asked (it ends at its next safe
        point); a waiting parent ends with its unfinished pieces."""
        with self._cursor(transaction=True) as cur:
            now = self._fetch_now(cur)
            cur.execute(QUERIES["lock_parents"], {"ids": [job_id]})  # parents first
            cur.execute(QUERIES["cancel_job"], {"id": job_id, "now": now})
            cancelled = cur.fetchall()
            if cancelled:
                self._settle(cur, cancelled)
            else:
                cur.execute(QUERIES["request_cancel"], {"id": job_id})
                if not cur.fetchall():
                    cur.execute(QUERIES["parent_counts"], {"parent": job_id})
                    parent = cur.fetchone()
                    if parent is not None and parent["state"] == "waiting":
                        error = "cancelled on request"
                        pieces.finish(piece_queries(cur), job_id, "cancelled", "null", error, now)
        job = self.get(job_id)
        if job.state in (JobState.CANCELLED, JobState.RUNNING) or job.cancel_requested:
            return job
        raise refusal(job, "cancel", "a job that has ended cannot be cancelled")

    @retried_on_conflict
    def retry(self, job_id: int, run_now: bool = False) -> Job:
        try:
            with self._cursor(transaction=True) as cur:
                # Its parent first (one lock order), and so the parent cannot settle
                # or be cancelled between the check and the recount.
                cur.execute(QUERIES["lock_parents"], {"ids": [job_id]})
                job = _run(cur, steps.retry_steps(job_id, run_now, self._now()))
        except StoreError as error:
            if isinstance(error.__cause__, psycopg.errors.UniqueViolation):
                # Its key was taken between the check and the update: refused, as then.
                return self.retry(job_id, run_now)
            raise
        if job is not None:
            return job
        raise refusal(self.get(job_id), "retry", RETRY_RULE)

    def prune(self, retention_seconds: float, limit: int = 10_000) -> tuple[int, int]:
        params = {"retention": float(retention_seconds), "limit": limit, "now": self._now()}
        jobs = self._all("prune_jobs", params)
        runs = self._all("prune_schedule_runs", params)
        return len(jobs), len(runs)

    def due_queues(self) -> list[str]:
        return [row["queue"] for row in self._all("due_queues", {"now": self._now()})]


def _run(cur: psycopg.Cursor[dict[str, Any]], plan: Generator[steps.Step, steps.Rows, T]) -> T:
    """Carry out a plan (store/steps.py) on a cursor, inside its transaction."""
    step = next(plan)
    while True:
        if step.rows is not None:
            with cur.copy(QUERIES[step.query]) as copy:
                copy.set_types(COPY_TYPES)
                for row in step.rows:
                    copy.write_row(row)
            rows = []
        else:
            cur.execute(QUERIES[step.query], step.params)
            rows = cur.fetchall() if returns_rows(cur) else []
        try:
            step = plan.send(normalise_rows(rows))
        except StopIteration as done:
            result: T = done.value
            return result


def _jsonb_text(text: str) -> Jsonb:
    """Already-encoded JSON, sent as jsonb without encoding it again."""
    return Jsonb(text, dumps=_unchanged)


def _unchanged(text: str) -> str:
    return text
