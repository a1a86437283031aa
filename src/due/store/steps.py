"""Multi-statement store operations as plans, written once for every driver.

A plan is a generator that yields `Step(query_name, params)` and is sent back
the rows of each statement (already in Python types). The same plan runs in
a store transaction, on a caller's sync connection, or on a caller's async
connection (`carry_out`, `carry_out_async`), so the deduplication logic exists
once, and so does the async path, which cannot share the sync operations.

Deduplication by key: insert with ON CONFLICT DO NOTHING. A conflict means a
job holds the key; lock it and ask whether it still deduplicates (active, or
succeeded less than `unique_for` ago). If so, return it; if not, release its
key and insert again. Concurrent enqueuers race only on the unique index, so
the outcome holds across processes and hosts.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from due.core.jobs import Job, JobState
from due.core.records import NewJob, job_from_row
from due.errors import InvalidStateError, StoreError
from due.store.backend import AsyncTransaction, Rows, StatementRefused, Transaction

MAX_KEY_ROUNDS = 20
BULK_CHUNK = 5000
"""Jobs per part of a bulk enqueue: a part's ids are reserved at once, its rows sent
before the next part's."""


@dataclass(frozen=True, slots=True)
class Many:
    """Rows for `Transaction.run_many`: the columns' names, then the rows."""

    columns: tuple[str, ...]
    rows: Iterable[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Step:
    query: str
    params: Mapping[str, Any]
    each: Sequence[Mapping[str, Any]] | None = None
    """For a batch statement: its rows (`Transaction.run_each`)."""
    many: Many | None = None
    """For an insert of many rows: the rows, made as they are sent
    (`Transaction.run_many`); its one row says how many were `written`."""


Plan = Generator[Step, Rows, list[Job]]
T = TypeVar("T")


def carry_out(tx: Transaction, plan: Generator[Step, Rows, T]) -> T:
    """Run a plan's steps in a transaction."""
    step = next(plan)
    while True:
        if step.many is not None:
            written = tx.run_many(step.query, step.many.columns, step.many.rows, step.params)
            rows: Rows = [{"written": written}]
        elif step.each is not None:
            rows = tx.run_each(step.query, step.each, step.params)
        else:
            rows = tx.run(step.query, step.params)
        try:
            step = plan.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result


async def carry_out_async(tx: AsyncTransaction, plan: Generator[Step, Rows, T]) -> T:
    """`carry_out` on a caller's async connection."""
    step = next(plan)
    while True:
        if step.many is not None:
            written = await tx.run_many(step.query, step.many.columns, step.many.rows, step.params)
            rows: Rows = [{"written": written}]
        elif step.each is not None:
            rows = await tx.run_each(step.query, step.each, step.params)
        else:
            rows = await tx.run(step.query, step.params)
        try:
            step = plan.send(rows)
        except StopIteration as done:
            result: T = done.value
            return result


def enqueue_steps(jobs: Sequence[NewJob], now: Any, *, chunk: int = BULK_CHUNK) -> Plan:
    """Insert `jobs`: one by one, or in chunks of batch statements (`run_many`)."""
    if chunk and len(jobs) > 1:
        return (yield from _enqueue_bulk(jobs, now, chunk))
    created = []
    for job in jobs:
        created.append((yield from _enqueue_one(job, now)))
    return created


def _fields(job: NewJob) -> dict[str, Any]:
    """What a request gives its row (its due time as the database will compute
    it: a delay from its clock, or a run_at)."""
    return {
        "task": job.task,
        "queue": job.queue,
        "priority": job.priority,
        "payload": job.payload,
        "run_at": job.run_at,
        "delay": job.delay,
        "max_attempts": job.max_attempts,
        "unique_for": job.unique_for,
        "stuck_after": job.stuck_after,
        "limits": job.limits,
    }


def _single_params(job: NewJob, now: Any) -> dict[str, Any]:
    return {**_fields(job), "key": job.key, "now": now}


def _enqueue_one(job: NewJob, now: Any) -> Generator[Step, Rows, Job]:
    params = _single_params(job, now)
    for _ in range(MAX_KEY_ROUNDS):
        rows = yield Step("insert_job", params)
        if rows:
            row = rows[0]
            return new_job(job, row["id"], row["run_at"], row["created_at"])
        if job.key is None:
            raise not_stored(job)
        holders = yield Step("lock_job_by_key", {"key": job.key, "now": now})
        if not holders:
            continue  # the holder released the key in between: insert again
        holder = holders[0]
        if holder["holds_key"]:
            return job_from_row(holder, deduplicated=True)
        yield Step("release_key", {"id": holder["id"]})
    raise StoreError(
        f"could not settle key {job.key!r} after {MAX_KEY_ROUNDS} rounds: its job was not "
        "inserted and no job holds it (a trigger on due_jobs that skips rows?)"
    )


def _enqueue_bulk(jobs: Sequence[NewJob], now: Any, chunk: int) -> Generator[Step, Rows, list[Job]]:
    created: list[Job] = []
    for start in range(0, len(jobs), chunk):
        part = jobs[start : start + chunk]
        (reserved,) = yield Step("reserve_ids", {"count": len(part), "now": now})
        database_now: datetime = reserved["now"]
        handles: list[tuple[NewJob, Job]] = []
        rows = _insert_rows(part, reserved["ids"], database_now, handles)
        (sent,) = yield Step("insert_jobs", {"now": database_now}, many=Many(INSERT_COLUMNS, rows))
        stored = {handle.id for _, handle in handles}
        if sent["written"] < len(handles):  # which rows went in: not those whose key is held
            present = yield Step("jobs_present", {"ids": list(stored)})
            stored = {row["id"] for row in present}
        for job, handle in handles:
            if handle.id in stored:
                created.append(handle)
            elif job.key is not None:  # its key is held: settle it one by one
                created.append((yield from _enqueue_one(job, now)))
            else:
                raise not_stored(job)
    wake = earliest_by_queue((job.queue, job.run_at) for job in created if not job.deduplicated)
    if wake:
        each = [{"queue": queue, "run_at": run_at} for queue, run_at in wake.items()]
        yield Step("notify_queues", {}, each=each)
    return created


INSERT_COLUMNS = (
    "id",
    "task",
    "queue",
    "priority",
    "payload",
    "run_at",
    "max_attempts",
    "key",
    "unique_for",
    "stuck_after",
    "limits",
)
"""The row of insert_jobs, in its order."""


def _insert_rows(
    jobs: Iterable[NewJob], ids: list[int], now: datetime, handles: list[tuple[NewJob, Job]]
) -> Iterator[tuple[Any, ...]]:
    """The rows of insert_jobs, made as they are sent, each job's handle with
    its row (so a driver that sends them in batches makes the next batch while
    the database inserts this one). Due times from the database's now (one
    instant for the transaction), in UTC, as the store gives a due time back."""
    for job_id, job in zip(ids, jobs, strict=True):
        if job.run_at is not None:
            run_at = job.run_at.astimezone(UTC)
        else:  # one due now takes now as it is: no timedelta made (0.4 us a job)
            run_at = now + timedelta(seconds=job.delay) if job.delay else now
        handles.append((job, new_job(job, job_id, run_at, now)))
        yield (
            job_id,
            job.task,
            job.queue,
            job.priority,
            job.payload,
            run_at,
            job.max_attempts,
            job.key,
            job.unique_for,
            job.stuck_after,
            job.limits,
        )


def not_stored(job: NewJob) -> StatementRefused:
    """A row the database skipped without an error: a trigger of the user's on
    due_jobs that returns NULL (RAISE(IGNORE) on SQLite), say. Raised in the
    transaction, so the store's own rolls back and nothing is written, and no
    handle is given for a job that does not exist. A refusal (StatementRefused):
    a group of enqueues it ends (enqueue_groups.py) wrote nothing, so each of
    its requests is made again alone, and only this one fails."""
    return StatementRefused(
        f"the database did not store a job of task {job.task!r} and gave no error "
        "(a trigger on due_jobs that skips rows?); the enqueue is refused as a whole"
    )


def grouped_rows(jobs: Sequence[NewJob]) -> list[dict[str, Any]]:
    """The rows of insert_grouped_jobs (jobs without keys)."""
    return [_fields(job) for job in jobs]


def new_job(job: NewJob, job_id: int, run_at: datetime, created_at: datetime) -> Job:
    """The handle of a job just inserted, from the request and what the store set."""
    # The required fields by position, in Job's order (about half the time of
    # keywords, once per job of a bulk enqueue); the conformance test of the
    # handle holds each in place.
    handle = Job(
        job_id,
        job.task,
        job.queue,
        job.priority,
        JobState.QUEUED,
        job.args,
        job.kwargs,
        run_at,
        0,
        job.max_attempts,
        created_at,
        key=job.key,
    )
    if job.redact:  # (rare: not a keyword paid by every job of a bulk)
        handle.redact = job.redact
    return handle


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
