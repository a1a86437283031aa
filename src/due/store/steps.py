"""Multi-statement store operations as plans, written once for every driver.

A plan is a generator that yields `Step(query_name, params)` and is sent back
the rows of each statement (already in Python types). The same plan runs on
a pooled connection, on a caller's sync connection, or on a caller's async
connection, so the deduplication logic exists once.

Deduplication by key: insert with ON CONFLICT DO NOTHING. A conflict means a
job holds the key; lock it and ask whether it still deduplicates (active, or
succeeded less than `unique_for` ago). If so, return it; if not, release its
key and insert again. Concurrent enqueuers race only on the unique index, so
the outcome holds across processes and hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from due.core.jobs import Job, JobState
from due.core.records import NewJob, job_from_row
from due.errors import InvalidStateError, StoreError

MAX_KEY_ROUNDS = 20

Rows = list[dict[str, Any]]
TimeParam = Callable[[datetime | None], Any]


@dataclass(frozen=True, slots=True)
class Step:
    query: str
    params: dict[str, Any]
    rows: list[tuple[Any, ...]] | None = None
    """For a COPY step: the rows to stream."""


Plan = Generator[Step, Rows, list[Job]]
T = TypeVar("T")


def _identity(value: datetime | None) -> Any:
    return value


def enqueue_steps(
    jobs: Sequence[NewJob],
    now: Any,
    *,
    chunk: int = 0,
    time_param: TimeParam = _identity,
    json_column: Callable[[str], Any] = str,
) -> Plan:
    """Insert `jobs`; in chunks of multi-row statements (or COPY) when `chunk` > 0."""
    if chunk and len(jobs) > 1:
        return (yield from _enqueue_bulk(jobs, now, chunk, time_param, json_column))
    created = []
    for job in jobs:
        created.append((yield from _enqueue_one(job, now, time_param)))
    return created


def _single_params(job: NewJob, now: Any, time_param: TimeParam) -> dict[str, Any]:
    return {
        "task": job.task,
        "queue": job.queue,
        "priority": job.priority,
        "payload": job.payload,
        "run_at": time_param(job.run_at),
        "delay": job.delay,
        "max_attempts": job.max_attempts,
        "key": job.key,
        "unique_for": job.unique_for,
        "stuck_after": job.stuck_after,
        "now": now,
    }


def _enqueue_one(job: NewJob, now: Any, time_param: TimeParam) -> Generator[Step, Rows, Job]:
    params = _single_params(job, now, time_param)
    for _ in range(MAX_KEY_ROUNDS):
        rows = yield Step("insert_job", params)
        if rows:
            row = rows[0]
            return new_job(job, row["id"], row["run_at"], row["created_at"])
        holders = yield Step("lock_job_by_key", {"key": job.key, "now": now})
        if not holders:
            continue  # the holder released the key in between: insert again
        holder = holders[0]
        if holder["holds_key"]:
            return job_from_row(holder, deduplicated=True)
        yield Step("release_key", {"id": holder["id"]})
    raise StoreError(f"could not settle key {job.key!r} after {MAX_KEY_ROUNDS} rounds")


def _enqueue_bulk(
    jobs: Sequence[NewJob],
    now: Any,
    chunk: int,
    time_param: TimeParam,
    json_column: Callable[[str], Any],
) -> Generator[Step, Rows, list[Job]]:
    created: list[Job] = []
    for start in range(0, len(jobs), chunk):
        part = jobs[start : start + chunk]
        (reserved,) = yield Step("reserve_ids", {"count": len(part), "now": now})
        database_now: datetime = reserved["now"]
        ids: list[int] = reserved["ids"]
        # Due times from the database's now (one instant for the whole transaction).
        run_ats = [job.run_at or database_now + timedelta(seconds=job.delay) for job in part]
        if any(job.key for job in part):
            rows = yield Step("insert_jobs", _bulk_params(part, ids, run_ats, database_now))
            inserted = {row["id"] for row in rows}
        else:  # nothing to deduplicate: stream the rows
            copied = _copy_rows(part, ids, run_ats, database_now, json_column)
            yield Step("copy_jobs", {}, rows=copied)
            inserted = set(ids)
        for job_id, job, run_at in zip(ids, part, run_ats, strict=True):
            if job_id in inserted:
                created.append(new_job(job, job_id, run_at, database_now))
            else:  # its key is held: settle it one by one
                created.append((yield from _enqueue_one(job, now, time_param)))
    wake = earliest_by_queue((job.queue, job.run_at) for job in created if not job.deduplicated)
    if wake:
        yield Step("notify_queues", {"queues": list(wake), "run_ats": list(wake.values())})
    return created


def _bulk_params(
    jobs: Sequence[NewJob], ids: list[int], run_ats: list[datetime], now: datetime
) -> dict[str, Any]:
    return {
        "ids": ids,
        "tasks": [job.task for job in jobs],
        "queues": [job.queue for job in jobs],
        "priorities": [job.priority for job in jobs],
        "payloads": [job.payload for job in jobs],
        "run_ats": run_ats,
        "max_attempts": [job.max_attempts for job in jobs],
        "keys": [job.key for job in jobs],
        "unique_fors": [job.unique_for for job in jobs],
        "stuck_afters": [job.stuck_after for job in jobs],
        "now": now,
    }


def _copy_rows(
    jobs: Sequence[NewJob],
    ids: list[int],
    run_ats: list[datetime],
    now: datetime,
    json_column: Callable[[str], Any],
) -> list[tuple[Any, ...]]:
    return [
        (
            job_id,
            job.task,
            job.queue,
            job.priority,
            json_column(job.payload),
            run_at,
            job.max_attempts,
            None,
            None,
            job.unique_for,
            now,
            job.stuck_after,
        )
        for job_id, job, run_at in zip(ids, jobs, run_ats, strict=True)
    ]


def new_job(job: NewJob, job_id: int, run_at: datetime, created_at: datetime) -> Job:
    """The handle of a job just inserted, from the request and what the store set."""
    return Job(
        id=job_id,
        task=job.task,
        queue=job.queue,
        priority=job.priority,
        state=JobState.QUEUED,
        args=job.args,
        kwargs=job.kwargs,
        run_at=run_at,
        attempt=0,
        max_attempts=job.max_attempts,
        created_at=created_at,
        key=job.key,
    )


def retry_steps(job_id: int, run_now: bool, now: Any) -> Generator[Step, Rows, Job | None]:
    """Queue a failed or cancelled job again (None when its state does not allow it).

    A retried job takes its key back, so enqueueing that key deduplicates again;
    if another live job holds the key now (enqueued after this one failed), the
    retry is refused with its name rather than leave two live jobs with one key.
    """
    rows = yield Step("job_key", {"id": job_id})
    key = rows[0]["key"] if rows else None
    if key is not None:
        holders = yield Step("lock_job_by_key", {"key": key, "now": now})
        holder = holders[0] if holders else None
        if holder is not None and holder["id"] != job_id:
            if holder["holds_key"]:
                raise InvalidStateError(
                    f"cannot retry job {job_id}: its key {key!r} is held by job "
                    f"{holder['id']} ({holder['state']}); retry that one, or cancel it first"
                )
            yield Step("release_key", {"id": holder["id"]})
    rows = yield Step("retry_job", {"id": job_id, "run_now": run_now, "now": now})
    if not rows:
        return None
    if rows[0]["parent_id"] is not None:
        # A retried piece is no longer an ended one on its parent.
        yield Step("uncount_piece", {"parent": rows[0]["parent_id"]})
    return job_from_row(rows[0])


def earliest_by_queue(pairs: Iterable[tuple[str, datetime]]) -> dict[str, datetime]:
    earliest: dict[str, datetime] = {}
    for queue, run_at in pairs:
        if queue not in earliest or run_at < earliest[queue]:
            earliest[queue] = run_at
    return earliest
