"""Jobs from the workers' side: claim, heartbeat, complete, rescue, release.

Every write about a running job is fenced by its lease token: a worker that
lost its lease writes nothing. Batches (heartbeats, acknowledgements, rescues)
are one statement each on PostgreSQL and one per job on SQLite (`run_each`);
a batch the database refuses is written again job by job (batches.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import operator
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from due.core.jobs import AttemptError, JobState
from due.core.records import (
    DEFAULT_MAX_LOST_LEASES,
    Claimed,
    ClaimedJob,
    ClaimRequest,
    Completion,
    HeartbeatReply,
    Lease,
    RescueResult,
    SweepMark,
    UnknownTaskSweep,
    UnknownTaskSweepResult,
    attempt_error_json,
    read_claimed,
)
from due.core.stats import Outcome, buckets_of, outcome_of
from due.errors import StoreError
from due.retry import judge_lost_lease
from due.store import batches, limit_claims, pieces
from due.store.backend import Backend, Columns, Lane, LockWaitTimeout, Rows, Transaction, Values
from due.store.conflicts import retried_on_conflict
from due.store.limit_claims import LimitedClaim
from due.store.settling import lock_parents, settle
from due.store.sql import describe_seconds
from due.store.stats import count_endings

DEFAULT_HANDBACK_SECONDS = 10.0
"""How long after its release a job handed back with its handler still running
may wait for its lease at the most (`release`'s `later`)."""
PROMOTE_PER_CLAIM = 500
"""Due timers a claim moves into the claim index, at most: a backlog of timers
due at the same instant gets there over a few claims, in run_at order."""


def claim(db: Backend, request: ClaimRequest) -> Claimed:
    """Lease up to `request.limit` due jobs of its queue."""
    with db.transaction(single=not (db.single_writer or request.limited)) as tx:
        values, limited = _claim_in(db, tx, request)
    return _with_new_keys(db, request, _readable(db, values, limited), limited)


def complete_and_claim(
    db: Backend, completions: Sequence[Completion], request: ClaimRequest
) -> tuple[set[int], Claimed]:
    """`complete` then `claim`, in one transaction: one commit (one fsync on
    SQLite, where the worker uses this) instead of two. If the database refuses
    an acknowledgement, they are written apart: one bad row must not stop the
    claims, nor the other acknowledgements."""
    try:
        with db.transaction() as tx:
            applied, freed = _complete_in(db, tx, completions)
            values, limited = _claim_in(db, tx, request)
    except Exception as error:
        if not completions or not batches.row_fault(error):
            raise
        return complete(db, completions), claim(db, request)
    limit_claims.after_ends(db, freed)
    return applied, _with_new_keys(db, request, _readable(db, values, limited), limited)


async def claim_on_loop(db: Backend, lane: Lane, request: ClaimRequest) -> list[ClaimedJob]:
    """`claim` from the event loop, where the claim is one statement (PostgreSQL's
    claim_jobs promotes the due timers itself). A claim that looks at limited
    jobs takes several: it runs on a thread."""
    if request.limited:
        return await asyncio.to_thread(claim, db, request)
    async with lane.statement() as tx:
        columns, rows = await tx.run_values("claim_jobs", _claim_params(tx.now, request))
    claimed, unreadable = read_claimed(columns, rows)
    if unreadable:  # rare: failed on the thread path, with its batch rules
        await asyncio.to_thread(_fail_unreadable, db, unreadable)
    return claimed


def _claim_in(
    db: Backend, tx: Transaction, request: ClaimRequest
) -> tuple[Values, LimitedClaim | None]:
    """The claim's statements: the due timers of the queue join the claim index,
    and the best due jobs are leased. With one writer (SQLite) the promotion is a
    statement of its own in the claim's transaction, which costs no round trip;
    PostgreSQL's claim_jobs does both in one statement. Also returns what the
    claim of limited jobs leased and left (None: it did not look at them)."""
    params = _claim_params(tx.now, request)
    if db.single_writer:
        tx.run("promote_timers", params)
    if not request.limited:
        return tx.run_values("claim_jobs", params), None
    # Limited jobs first: those with room are as due as the others, and a
    # busy queue of unlimited jobs must not keep them waiting for ever. Only
    # as many as can start now: one held ready would hold its limit's slot
    # meanwhile, or start too late for its rate.
    limit_claims.look_in(tx, db)
    startable = request.limit if request.free is None else min(request.free, request.limit)
    limited = (
        limit_claims.claim_limited(tx, startable, params, writes_keys=db.single_writer)
        if startable > 0
        else LimitedClaim()
    )
    columns, leased = limited.values
    if len(leased) >= request.limit:
        return limited.values, limited
    columns, rows = tx.run_values("claim_jobs", {**params, "limit": request.limit - len(leased)})
    return (columns, [*leased, *rows]), limited


def _with_new_keys(
    db: Backend, request: ClaimRequest, claimed: list[ClaimedJob], limited: LimitedClaim | None
) -> Claimed:
    """`claimed`, and when the claim passed over candidates whose keys were not
    stored yet: those keys written (on their own), and a claim for the rest.
    Says whether it passed over keys other claims held (`contended`)."""
    result = Claimed(claimed)
    if limited is None:
        return result
    result.contended = limited.contended
    if not limited.new_keys or len(claimed) >= request.limit:
        return result
    limit_claims.write_keys(db, limited.new_keys)
    rest = dataclasses.replace(request, limit=request.limit - len(claimed))
    if rest.free is not None:
        rest = dataclasses.replace(rest, free=max(0, rest.free - limited.leased))
    with db.transaction() as tx:
        values, more = _claim_in(db, tx, rest)
    result += _readable(db, values, more)
    result.contended |= more is not None and more.contended
    return result


def _claim_params(now: Any, request: ClaimRequest) -> dict[str, Any]:
    return {
        "queue": request.queue,
        "limit": request.limit,
        "promote": PROMOTE_PER_CLAIM,
        "worker": request.worker,
        "lease": float(request.lease_seconds),
        "leases": json.dumps(dict(request.task_leases or {})),
        "tasks": list(request.tasks) if request.tasks is not None else None,
        "now": now,
    }


def _readable(db: Backend, values: Values, limited: LimitedClaim | None = None) -> list[ClaimedJob]:
    """The claimed jobs; those whose stored values cannot be read fail alone.
    Those that count against a limit say so (and by when a rate's handler
    must begin)."""
    claimed, unreadable = read_claimed(*values)
    if unreadable:
        _fail_unreadable(db, unreadable)
    if limited is not None and limited.leased:
        ids = {row[0] for row in limited.values[1]}
        for job in claimed:
            if job.id in ids:
                job.limited = True
                job.start_by = limited.start_by.get(job.id)
    return claimed


def _fail_unreadable(db: Backend, unreadable: Sequence[Completion]) -> None:
    """End the claimed jobs whose stored values cannot be read. The claim has
    committed, so the jobs that were read are this worker's whatever happens
    here: a failure to write these ends is not the claim's (a job not failed
    now is rescued when its lease expires)."""
    with contextlib.suppress(StoreError):
        complete(db, unreadable)


def heartbeat(db: Backend, leases: Sequence[Lease]) -> HeartbeatReply:
    """Extend the leases still held; report the lost ones."""
    if not leases:
        return HeartbeatReply(frozenset(), frozenset())
    return batches.heartbeat_each(functools.partial(_heartbeat_batch, db), leases)


def _heartbeat_batch(db: Backend, leases: Sequence[Lease]) -> HeartbeatReply:
    """Renew every lease in one statement. Where rows are locked, it skips rows
    another transaction holds; those are tried again in a second statement that
    waits for them briefly, and a row still held after that (a handler's own
    open transaction on its job) is neither renewed nor lost this time."""
    with db.transaction(single=True) as tx:
        rows = tx.run_each("heartbeat", _lease_rows(leases), {"now": tx.now})
    answered = {row["id"] for row in rows}
    missing = [lease for lease in leases if lease.job_id not in answered]
    if missing and db.locks_rows:
        waited = _heartbeat_held(db, missing)
        if waited is None:
            missing = []  # still held: neither renewed nor lost this time
        else:
            rows += waited
            found = {row["id"] for row in waited}
            missing = [lease for lease in missing if lease.job_id not in found]  # gone
    extended = frozenset(row["id"] for row in rows if row["renewed"])
    lost = {lease.job_id for lease in missing} | {row["id"] for row in rows if not row["renewed"]}
    cancel = frozenset(row["id"] for row in rows if row["cancel_requested"])
    return HeartbeatReply(extended, frozenset(lost), cancel)


def _heartbeat_held(db: Backend, held: Sequence[Lease]) -> Rows | None:
    """The heartbeat of rows another transaction held, waiting for them a little
    (None: still held)."""
    try:
        with db.transaction() as tx:
            tx.run("bound_lock_wait")
            return tx.run_each("heartbeat_waiting", _lease_rows(held), {"now": tx.now})
    except LockWaitTimeout:
        return None


def _lease_rows(leases: Sequence[Lease]) -> list[dict[str, Any]]:
    return [
        {
            "id": lease.job_id,
            "token": lease.lease_token,
            "lease": float(lease.lease_seconds),
            "progress": lease.progress,
            "started": lease.started,
        }
        for lease in leases
    ]


def complete(db: Backend, completions: Sequence[Completion]) -> set[int]:
    """Record the end of attempts; returns the ids whose end is recorded: written
    now (the token was still current), or by an earlier try of this write
    whose reply was lost."""
    if not completions:
        return set()
    written = batches.complete_each(functools.partial(_complete_batch, db), completions)
    return recorded(db, completions, written)


def recorded(db: Backend, completions: Sequence[Completion], written: set[int]) -> set[int]:
    """`written`, and the ids among the others whose job shows its completion
    already: an acknowledgement whose reply was lost after its commit (a
    restart, a broken connection) is written again, and its tokens are stale
    by then, its own doing, not a lost lease's. Read only when a token was
    stale, which is rare."""
    others = [c for c in completions if c.job_id not in written]
    if not others:
        return written
    ends = [
        {"id": c.job_id, "token": c.lease_token, "state": c.state.value, "error": c.error_json()}
        for c in others
    ]
    with db.transaction(read=True) as tx:
        shown = tx.run_each("completions_recorded", ends)
    return written | {row["id"] for row in shown}


async def complete_on_loop(
    db: Backend, lane: Lane, completions: Sequence[Completion]
) -> set[int] | None:
    """`complete` from the event loop, for a batch that is one statement there
    (counted by the statement, settling no parent); None for any other batch,
    which takes the thread path."""
    if not completions or not _alone(db, completions):
        return None
    async with lane.statement() as tx:
        # The lane is PostgreSQL's, where a batch's fields are its arrays: the
        # rows written come back as tuples, and are read a column at a time.
        params = {"now": tx.now, **_endings(completions, counted=True)}
        names, values = await tx.run_values("complete_jobs", params)
    columns = dict(zip(names, zip(*values, strict=True), strict=True)) if values else {}
    if columns and pieces.any_concerns_a_parent(columns):
        rows = [dict(zip(names, row, strict=True)) for row in values]
        await asyncio.to_thread(_settle_apart, db, rows)
    if columns and any(columns["limited"]):
        ended = [
            job for job, limited in zip(columns["id"], columns["limited"], strict=True) if limited
        ]
        await asyncio.to_thread(limit_claims.after_ends, db, ended)
    written = set(columns.get("id", ()))
    if len(written) < len(completions):
        return await asyncio.to_thread(recorded, db, completions, written)
    return written


def _alone(db: Backend, completions: Sequence[Completion]) -> bool:
    """Whether the batch is its whole transaction: its statement counts its own
    ends and it settles no parent (autocommitted, one round trip)."""
    return db.counting_statements and not any(c.settles for c in completions)


@retried_on_conflict
def _complete_batch(db: Backend, completions: Sequence[Completion]) -> set[int]:
    if _alone(db, completions):
        with db.transaction(single=True) as tx:
            rows = _write_completions(db, tx, completions)
        _settle_apart(db, rows)
        limit_claims.after_ends(db, [row["id"] for row in rows if row["limited"]])
        return {row["id"] for row in rows}
    with db.transaction() as tx:
        written, freed = _complete_in(db, tx, completions)
    limit_claims.after_ends(db, freed)
    return written


def _complete_in(
    db: Backend, tx: Transaction, completions: Sequence[Completion]
) -> tuple[set[int], list[int]]:
    """The ends written, and those of limited jobs whose waiting jobs are to be
    let go once this transaction has committed (store/limit_claims.py; with
    one writer, here: nothing can count them running meanwhile)."""
    rows = _write_completions(db, tx, completions)
    settle(tx, rows)
    freed = [row["id"] for row in rows if row["limited"]]
    if db.single_writer:
        limit_claims.let_go_after_ends(tx, freed)
        freed = []
    return {row["id"] for row in rows}, freed


def _write_completions(db: Backend, tx: Transaction, completions: Sequence[Completion]) -> Rows:
    """The fenced write of the ends, counted; the parents of those that say they
    settle one locked first. Returns the rows written."""
    if not completions:
        return []
    lock_parents(tx, [c.job_id for c in completions if c.settles])
    counted = db.counting_statements
    rows = tx.run_each("complete_jobs", _endings(completions, counted), {"now": tx.now})
    if not counted:
        by_id = {c.job_id: c for c in completions}
        count_endings(tx, rows, requeued=Outcome.RETRIED, completions=by_id)
    return rows


@retried_on_conflict
def _settle_apart(db: Backend, rows: Rows) -> None:
    """Settle, in a transaction of their own (parents locked first), the rows a
    statement on its own wrote that concern a parent after all: a completion
    that did not say it settles one must still be counted on it, late rather
    than never."""
    concerned = [row for row in rows if pieces.concerns_a_parent(row)]
    if not concerned:
        return
    with db.transaction() as tx:
        lock_parents(tx, [row["id"] for row in concerned])
        settle(tx, concerned)


def _outcome_texts() -> dict[tuple[str, bool], str | None]:
    """What an attempt's end counts as (outcome_of), by its state's text and
    whether it warned: looked up per job instead of computed."""
    texts: dict[tuple[str, bool], str | None] = {}
    for state in JobState:
        for warned in (False, True):
            outcome = outcome_of(state.value, requeued=Outcome.RETRIED, warned=warned)
            texts[state.value, warned] = None if outcome is None else outcome.value
    return texts


_OUTCOME_TEXTS = _outcome_texts()
_JOB_ID = operator.attrgetter("job_id")


def _endings(completions: Sequence[Completion], counted: bool) -> Columns:
    """Completions as complete_jobs takes them, a list per field (the hottest
    batch of all: no dict per job); with what each counts as when the statement
    counts its ends itself (`counted`: otherwise count_endings counts them from
    the rows written)."""
    # In id order: complete_jobs updates, and so locks, its rows in this order.
    completions = sorted(completions, key=_JOB_ID)
    states = [str(c.state) for c in completions]  # text (a StrEnum's .value is slower)
    endings = Columns(
        id=[c.job_id for c in completions],
        token=[c.lease_token for c in completions],
        state=states,
        result=[c.result for c in completions],
        error=[c.error_json() for c in completions],
        retry_in=[c.retry_in for c in completions],
        progress=[c.progress for c in completions],
        warning=[c.warning for c in completions],
    )
    if counted:
        endings["outcome"] = [
            _OUTCOME_TEXTS[state, bool(c.warning)]
            for state, c in zip(states, completions, strict=True)
        ]
        endings["bucket"] = buckets_of([c.seconds for c in completions])
        endings["seconds"] = [c.seconds or 0.0 for c in completions]
    return endings


@retried_on_conflict
def rescue(
    db: Backend, limit: int = 1000, max_lost_leases: int = DEFAULT_MAX_LOST_LEASES
) -> RescueResult:
    """Requeue (or fail) running jobs whose lease has expired."""
    with db.transaction(read=True) as tx:
        if not tx.run("any_expired", {"now": tx.now}):
            return RescueResult()  # the common case, without a write transaction
    with db.transaction() as tx:
        expired = tx.run("select_expired", {"limit": limit, "now": tx.now})
        if expired and tx.locks_rows:
            tx.run("bound_rescue_locks")
            expired = _with_parents_locked(tx, expired)
        if not expired:
            return RescueResult()
        verdicts = _verdicts(expired, tx.instant(), max_lost_leases)
        rows = tx.run_each("rescue_jobs", verdicts, {"now": tx.now})
        count_endings(tx, rows, requeued=Outcome.RESCUED)
        settle(tx, rows)
        freed = _let_go_in(db, tx, [row["id"] for row in rows])
    limit_claims.after_ends(db, freed)
    return RescueResult(
        requeued=tuple(row["id"] for row in rows if row["state"] == JobState.QUEUED),
        failed=tuple(row["id"] for row in rows if row["state"] == JobState.FAILED),
        cancelled=tuple(row["id"] for row in rows if row["state"] == JobState.CANCELLED),
    )


def _verdicts(expired: Rows, at: datetime, max_lost_leases: int) -> list[dict[str, Any]]:
    rows = []
    for row in expired:
        verdict = judge_lost_lease(
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            lost_leases=row["lost_leases"],
            worker=row["worker"],
            max_lost_leases=max_lost_leases,
            attempt_status=row["attempt_status"],
        )
        error = AttemptError(
            row["attempt"], verdict.reason, None, at, "lease_lost", worker=row["worker"]
        )
        rows.append(
            {
                "id": row["id"],
                "token": row["lease_token"],
                "gives_up": verdict.gives_up,
                "error": attempt_error_json(error),
                "status": row["attempt_status"],
            }
        )
    return rows


def _with_parents_locked(tx: Transaction, expired: Rows) -> Rows:
    """The expired jobs whose parents this transaction could lock at once
    (parents first: the one lock order); the others wait for a later round."""
    children = [row["id"] for row in expired if row["parent_id"] or row["completes"]]
    if not children:
        return expired
    locked = {row["id"] for row in tx.run("lock_parents_skip_locked", {"ids": children})}
    return [
        row
        for row in expired
        if not (row["parent_id"] or row["completes"])
        or (row["parent_id"] or row["completes"]) in locked
    ]


@retried_on_conflict
def release(
    db: Backend,
    leases: Sequence[Lease],
    reason: str,
    later: Collection[int] = (),
    handback_seconds: float = DEFAULT_HANDBACK_SECONDS,
    *,
    limits: Mapping[int, str] | None = None,
) -> set[int]:
    """Hand back running jobs, due again at once, their attempt not counted (a
    job asked to stop ends cancelled instead). Those in `later` (a handler
    thread of theirs still runs, which nothing can interrupt) are handed back
    as they stand: due only once the lease they hold expires, when a rescue
    puts them back, their attempt still not counted; their token moves on now,
    so that thread can write nothing more. That lease is cut to end at most
    `handback_seconds` from now: the worker must have exited by then (a task's
    lease may be a day). `limits`: the limits to write on jobs stored as
    counting against none (by id, as an enqueue stores them)."""
    if not leases:
        return set()
    with db.transaction() as tx:
        lock_parents(tx, [lease.job_id for lease in leases])
        if limits:
            tokens = {lease.job_id: lease.lease_token for lease in leases}
            tx.run_each(
                "set_job_limits",
                Columns(
                    id=list(limits),
                    token=[tokens[job] for job in limits],
                    limits=list(limits.values()),
                ),
            )
        rows = tx.run_each(
            "release_jobs",
            [
                {"id": lease.job_id, "token": lease.lease_token, "later": lease.job_id in later}
                for lease in leases
            ],
            {"reason": reason, "handback": float(handback_seconds), "now": tx.now},
        )
        count_endings(tx, rows)  # the cancelled ones (a job handed back is no end)
        settle(tx, [row for row in rows if row["state"] == "cancelled"])
        freed = _let_go_in(db, tx, [row["id"] for row in rows])
    limit_claims.after_ends(db, freed)
    return {row["id"] for row in rows}


def _let_go_in(db: Backend, tx: Transaction, ended: list[int]) -> list[int]:
    """With one writer, let the jobs waiting for the ended jobs' slots go in
    the ends' transaction; otherwise the ended jobs, to do so once committed."""
    if not db.single_writer:
        return ended
    limit_claims.let_go_after_ends(tx, ended)
    return []


def next_due(
    db: Backend, queue: str, tasks: Sequence[str], *, limited: bool = False
) -> datetime | None:
    """When the next queued job of `tasks` in `queue` is due (with `limited`,
    counting the limited jobs, and when a limit that jobs wait for opens)."""
    with db.transaction(read=True) as tx:
        params = {"queue": queue, "tasks": list(tasks), "now": tx.now}
        times = [tx.run("next_due", params)[0]["run_at"]]
        if limited:
            times.append(tx.run("limited_next_due", params)[0]["run_at"])
    known = [time for time in times if time is not None]
    return min(known) if known else None


def fail_unknown_tasks(db: Backend, sweep: UnknownTaskSweep) -> UnknownTaskSweepResult:
    """Fail the queued jobs no live worker of their queue knows (see UnknownTaskSweep).

    The candidates are found in a read transaction, at most `sweep.scan`
    entries of each queue's claim index read; only they are written. On SQLite the look at a big
    backlog held the one write lock for as long as it read (a second per
    million jobs: every enqueue of the database waited for it)."""
    unknown: list[int] = []
    undeclared: list[int] = []
    after: dict[str, SweepMark] = {}
    after_limited: dict[str, SweepMark] = {}
    with db.transaction(read=True) as tx:
        for queue in sweep.queues:
            rows = tx.run("unknown_task_candidates", _look_params(sweep, queue, tx.now))
            unknown += [row["id"] for row in rows if row["id"] is not None]
            if rows[0]["examined"] >= sweep.scan:
                last = rows[0]
                after[queue] = SweepMark(
                    last["after_priority"], last["after_run_at"], last["after_id"]
                )
            # The jobs that count against a limit are in no claim index: looked
            # at in their own, for unknown tasks and for limits nobody declares.
            rows = tx.run("limited_sweep_candidates", _limited_look_params(sweep, queue, tx.now))
            unknown += [row["id"] for row in rows if row["id"] is not None and row["unknown"]]
            undeclared += [
                row["id"] for row in rows if row["id"] is not None and not row["unknown"]
            ]
            if rows[0]["examined"] >= sweep.scan:
                last = rows[0]
                after_limited[queue] = SweepMark(0, last["after_run_at"], last["after_id"])
    failed = _fail_unknown(db, sweep, sorted(unknown)) if unknown else []
    dropped = _drop_undeclared(db, sweep, sorted(undeclared)) if undeclared else []
    return UnknownTaskSweepResult(failed, after, dropped, after_limited)


def _limited_look_params(sweep: UnknownTaskSweep, queue: str, now: Any) -> dict[str, Any]:
    mark = sweep.after_limited.get(queue)
    known = sweep.task_limits if sweep.task_limits is not None else dict.fromkeys(sweep.tasks, ())
    return {
        "queue": queue,
        "task_limits": json.dumps({task: list(names) for task, names in known.items()}),
        "worker": sweep.worker if sweep.task_limits is not None else None,
        "grace": float(sweep.grace_seconds),
        "scan": sweep.scan,
        "after_run_at": None if mark is None else mark.run_at,
        "after_id": None if mark is None else mark.id,
        "now": now,
    }


@retried_on_conflict
def _drop_undeclared(db: Backend, sweep: UnknownTaskSweep, ids: list[int]) -> list[int]:
    with db.transaction() as tx:
        known = sweep.task_limits or {}
        params = {
            "ids": ids,
            "task_limits": json.dumps({task: list(names) for task, names in known.items()}),
            "worker": sweep.worker,
            "grace": float(sweep.grace_seconds),
            "now": tx.now,
        }
        return sorted(row["id"] for row in tx.run("drop_undeclared_limits", params))


def _look_params(sweep: UnknownTaskSweep, queue: str, now: Any) -> dict[str, Any]:
    mark = sweep.after.get(queue)
    return {
        "queue": queue,
        "tasks": list(sweep.tasks),
        "grace": float(sweep.grace_seconds),
        "scan": sweep.scan,
        "after_priority": None if mark is None else mark.priority,
        "after_run_at": None if mark is None else mark.run_at,
        "after_id": None if mark is None else mark.id,
        "now": now,
    }


@retried_on_conflict
def _fail_unknown(db: Backend, sweep: UnknownTaskSweep, ids: list[int]) -> list[int]:
    with db.transaction() as tx:
        params = {
            "ids": ids,
            "tasks": list(sweep.tasks),
            "grace": float(sweep.grace_seconds),
            "grace_text": describe_seconds(sweep.grace_seconds),
            "alive": float(sweep.alive_seconds),
            "now": tx.now,
        }
        rows = tx.run("fail_unknown_tasks", params)
        count_endings(tx, rows)
        settle(tx, rows)  # a piece failed here still counts on its parent
    return sorted(row["id"] for row in rows)


def due_queues(db: Backend) -> list[str]:
    """Names of the queues that hold jobs due now."""
    with db.transaction(read=True) as tx:
        return [row["queue"] for row in tx.run("due_queues", {"now": tx.now})]
