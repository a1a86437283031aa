"""The values that cross the store boundary, the same for every backend."""

from __future__ import annotations

import json
import json.scanner
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from due.core.jobs import AttemptError, Job, JobState, Pieces
from due.core.limits import decode_job_limits
from due.errors import InvalidStateError
from due.shown_arguments import STORED_KEY, read_stored

DEFAULT_MAX_LOST_LEASES = 3
"""A job that lost its lease this many times in a row is failed, not retried:
its worker keeps dying while running it (out of memory, a segfault)."""

DEFAULT_ALIVE_SECONDS = 30.0
"""A worker seen within this long counts as live (3 leases of the default 10 s)."""

UNKNOWN_TASK_SCAN = 20_000
"""Entries of a queue's claim index one sweep reads, at most: a sweep costs
each worker tens of milliseconds of the database's time a minute however big
the backlog, and a backlog of a million is read through in under an hour."""


@dataclass(slots=True)  # not frozen: built per job on hot paths, and frozen is slow
class NewJob:
    """A validated enqueue request, ready to insert."""

    task: str
    queue: str
    priority: int
    payload: str
    """JSON text of {"args": [...], "kwargs": {...}}."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    max_attempts: int
    run_at: datetime | None = None
    """An absolute due time; when None, the job is due `delay` seconds after now."""
    delay: float = 0.0
    key: str | None = None
    unique_for: float | None = None
    stuck_after: float | None = None
    identity: str | None = None
    """For a piece: its arguments however spelled (Task.canonical_arguments)."""
    limits: str | None = None
    """The limits it counts against: JSON [[name, key], ...] (core/limits.py)."""
    redact: tuple[str | int, ...] = ()
    """What its payload stores of its redaction (due.shown_arguments), for its handle."""


@dataclass(frozen=True, slots=True)
class StepRequest:
    """One step of a workflow to enqueue.

    Its job, its name in the workflow, the steps it comes after (indexes of
    earlier steps), and its policy when one of them fails or is cancelled
    ("cancel" or "run").
    """

    job: NewJob
    name: str
    after: tuple[int, ...] = ()
    on_upstream_failure: str = "cancel"
    after_names: tuple[str, ...] = ()
    """Steps of the workflow that exist already, by name (steps added at run time)."""


@dataclass(slots=True)  # not frozen: built per job on hot paths, and frozen is slow
class ClaimedJob:
    """A job leased to a worker: what the executor needs to run one attempt."""

    id: int
    task: str
    queue: str
    priority: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_token: int
    lease_expires_at: datetime
    run_at: datetime
    created_at: datetime
    scheduled_for: datetime | None = None
    checkpoint: Any = None
    """The last checkpoint saved by an earlier attempt (None: start from the beginning)."""
    parent_id: int | None = None
    completes: int | None = None
    has_pieces: bool = False
    """An earlier attempt spawned pieces: this attempt ends by waiting for them."""
    workflow_id: int | None = None
    """The workflow it is a step of: its end releases the steps after it."""
    schedule: str | None = None
    """The schedule whose run it is."""
    headers: dict[str, str] | None = None
    """The headers stored with it as it was enqueued (due.instrumentation)."""
    first_attempt: dict[str, str] | None = None
    """The headers kept by its earliest attempt that kept any (due.instrumentation)."""
    limited: bool = False
    """Claimed as counting against a limit (by the claim of limited jobs)."""
    start_by: float | None = None
    """For a job that counts against a rate: the latest instant (the database's,
    seconds since the epoch) its handler may begin, or it is handed back
    unstarted (core/limits.py, start_tolerance)."""

    @property
    def settles_a_parent(self) -> bool:
        """Its end must be settled in its own transaction.

        It is counted on a parent (a piece, a completion), or releases the
        steps after it (a step of a workflow).
        """
        return (
            self.parent_id is not None or self.completes is not None or self.workflow_id is not None
        )


class Claimed(list[ClaimedJob]):
    """The jobs a claim leased, in claim order."""

    contended: bool = False
    """It passed over jobs whose limit key another claim held (store/limit_claims.py):
    they may be claimable a moment later."""


@dataclass(slots=True)  # not frozen: built per job on hot paths, and frozen is slow
class Completion:
    """The end of one attempt, to be written fenced by (job_id, lease_token).

    `state` is SUCCEEDED, FAILED, CANCELLED, or QUEUED for a retry that is due
    `retry_in` seconds from now.
    """

    job_id: int
    lease_token: int
    state: JobState
    result: str | None = None
    error: AttemptError | None = None
    retry_in: float | None = None
    progress: str | None = None
    """The last progress (JSON), written with the end of the attempt."""
    settles: bool = False
    """Its end changes a parent's count (a piece, a completion, a parent now waiting):
    written in one transaction with that change."""
    seconds: float | None = None
    """How long its handler ran (counted in the duration figures)."""
    warning: str | None = None
    """A success whose result failed the task's check=: why (counted as warned)."""
    headers: Mapping[str, str] | None = None
    """Headers kept with its error's entry in the history (due.instrumentation)."""

    def error_json(self) -> str | None:
        """Its error as the JSON entry a job's history keeps, or None."""
        return None if self.error is None else attempt_error_json(self.error, self.headers)


@dataclass(frozen=True, slots=True)
class Lease:
    """A running job as its worker knows it, for heartbeats."""

    job_id: int
    lease_token: int
    lease_seconds: float
    progress: str | None = None
    """Progress (JSON) that moved since the last heartbeat, else None."""
    started: bool = False
    """Its handler has begun since the last heartbeat that was answered: from
    now on the attempt counts (a job whose worker dies before saying so is
    given back without spending one)."""


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """Which leases were extended, and which of those are asked to cancel.

    The leases not extended are lost: their jobs are abandoned.
    """

    extended: frozenset[int]
    lost: frozenset[int]
    cancel_requested: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class RescueResult:
    """Jobs whose lease had expired: put back in the queue, failed, or cancelled.

    Those cancelled had been asked to stop.
    """

    requeued: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    cancelled: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        """How many jobs the rescue moved."""
        return len(self.requeued) + len(self.failed) + len(self.cancelled)


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """What a worker's producer asks for: up to `limit` due jobs of `queue`."""

    queue: str
    limit: int
    worker: str
    lease_seconds: float
    tasks: Sequence[str] | None = None
    """Only jobs of these tasks (None: any task)."""
    task_leases: Mapping[str, float] | None = None
    """Lease lengths of the tasks that set their own."""
    limited: bool = False
    """Also the jobs that count against a limit (store/limit_claims.py)."""
    free: int | None = None
    """Slots free to start a job now (None: `limit`): jobs that count against
    a limit are claimed only for those, never ahead (one held ready would hold
    its limit's slot meanwhile, or start too late for its rate)."""


@dataclass(frozen=True, slots=True)
class UnknownTaskSweep:
    """A look for queued jobs of tasks that no live worker knows.

    Jobs of `queues` that stayed due past `grace_seconds` while neither the
    caller (which knows `tasks`) nor any live worker of their queue knew their
    task (live: running or stopping, seen within `alive_seconds`).
    """

    queues: Sequence[str]
    tasks: Sequence[str]
    grace_seconds: float
    alive_seconds: float = DEFAULT_ALIVE_SECONDS
    scan: int = UNKNOWN_TASK_SCAN
    """Entries of each queue's claim index read, at most."""
    after: Mapping[str, SweepMark] = field(default_factory=dict)
    """Per queue, where the last sweep stopped (absent: from the first job in
    the claim's order)."""
    task_limits: Mapping[str, Sequence[str]] | None = None
    """Per task of `tasks`, the limits the caller's code gives it: a due job of
    the task that counts against another loses it (a limit taken out of the
    code), when it was enqueued before the caller started or has been due past
    the grace (None: not looked for)."""
    worker: str | None = None
    """The caller (its registration says when it started)."""
    after_limited: Mapping[str, SweepMark] = field(default_factory=dict)
    """Per queue, where the last sweep of the jobs that count against a limit
    stopped (in run_at order: their priority is 0 here)."""

    def __post_init__(self) -> None:
        if self.scan < 1:  # a sweep that looks at nothing would never read on
            raise ValueError(f"an unknown-task sweep looks at 1 job or more, not {self.scan}")


@dataclass(frozen=True, slots=True)
class SweepMark:
    """The last job a sweep of a queue looked at: the next one starts after it.

    In the claim's order: priority, run_at, id.
    """

    priority: int
    run_at: Any
    """Its run_at as the store keeps it (on SQLite, seconds finer than the
    microseconds of a datetime, shared by the jobs enqueued together: one
    read back as a datetime could fall after them)."""
    id: int


@dataclass(frozen=True, slots=True)
class UnknownTaskSweepResult:
    """What a sweep for jobs of unknown tasks failed, and where the next one starts."""

    failed: list[int]
    """The jobs failed, in id order."""
    after: dict[str, SweepMark]
    """Per queue, where the next sweep starts (absent: it read to the end, and
    the next sweep starts from the first job in the claim's order again)."""
    limits_dropped: list[int] = field(default_factory=list)
    """The jobs that lost a limit their task no longer names in the caller's
    code, in id order."""
    after_limited: dict[str, SweepMark] = field(default_factory=dict)
    """As `after`, for the jobs that count against a limit."""


@dataclass(frozen=True, slots=True)
class PieceSpawn:
    """Pieces added under a running parent (fenced by its lease token)."""

    parent: int
    lease_token: int
    jobs: Sequence[NewJob]
    on_complete: str | None = None
    """The completion task's spec (pieces.completion_spec); None keeps what was set."""
    on_piece_failure: str | None = None
    """"fail" or "continue"; None keeps what was set."""


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """A waiting parent named `name` with these pieces, made outside any job."""

    name: str
    jobs: Sequence[NewJob]
    on_complete: str | None
    on_piece_failure: str


@dataclass(frozen=True, slots=True)
class WorkerRegistration:
    """A worker process as it starts: where it runs, what it serves and knows."""

    worker: str
    host: str
    pid: int
    queues: Mapping[str, int]
    tasks: Sequence[str] = ()


DEFAULT_RETENTION_SUCCEEDED = 7 * 86400.0
DEFAULT_RETENTION_FAILED = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished jobs are kept, per outcome (seconds).

    Failed and cancelled ones longer, since someone may still want to look at
    them or retry them. Their counts and durations are kept in the rollups for
    ever.
    """

    succeeded: float = DEFAULT_RETENTION_SUCCEEDED
    failed: float = DEFAULT_RETENTION_FAILED
    """Failed and cancelled jobs."""


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs `app.jobs` lists (each None: any)."""

    queue: str | None = None
    state: JobState | None = None
    task: str | None = None
    limit: int = 100
    parent: int | None = None
    stuck_only: bool = False
    key: str | None = None
    before: int | None = None
    """Only jobs with a smaller id (the next page, newest first)."""
    since: datetime | None = None
    """Only jobs whose time is this one or later: the time a job ended if it
    has (succeeded, failed or cancelled), else the time it was created."""
    until: datetime | None = None
    """Only jobs whose time (as for `since`) is before this one."""
    error_contains: str | None = None
    """Only jobs whose last error contains this text (case counts)."""
    key_prefix: str | None = None
    """Only jobs enqueued with a key that starts with this text."""
    workflow: int | None = None
    """Only the steps of this workflow."""
    args_contains: str | None = None
    """Only jobs whose arguments hold this JSON object (as compact JSON text):
    their keyword arguments, or one positional argument that is an object
    and is not shown hidden."""
    hidden_positions: str | None = None
    """For `args_contains`: the positional arguments shown hidden by task
    (JSON text, `{"task": [1, 2]}`), beyond the positions each job stored;
    never searched."""


@dataclass(frozen=True, slots=True)
class Action:
    """Something done by hand (cancel, retry, pause, ...), by whom, to what.

    Recorded when the call was given `by=` (the dashboard always gives it);
    `app.history` lists them.
    """

    at: datetime
    """When it was done."""
    action: str
    """What was done (`cancel`, `retry`, `pause`, `resume`, `trigger`, `prune`...)."""
    by: str
    """Who did it, as given to `by=`."""
    job_id: int | None = None
    """The job it was done to, if any."""
    schedule: str | None = None
    """The schedule it was done to, if any."""
    queue: str | None = None
    """The queue it was done to, if any."""


def attempt_error_json(error: AttemptError, headers: Mapping[str, str] | None = None) -> str:
    """An attempt's error as the JSON entry a job's history keeps.

    With the headers its instrumentation kept, if any: the first attempt's are
    read by the claims of the attempts after it (due.instrumentation).
    """
    # Not ensure_ascii: a lone surrogate escaped as \udcxx passes the driver,
    # then SQLite's JSON functions store it as bytes that are not UTF-8 (the row
    # can no longer be read) and PostgreSQL refuses the whole batch. Raw, the
    # driver refuses that row alone before sending it (batches.py strips it).
    record = {
        "attempt": error.attempt,
        "kind": error.kind,
        "error": error.error,
        "traceback": error.traceback,
        "at": error.at.isoformat() if error.at else None,
    }
    # Written only when known: most histories stay as short as they were.
    if error.exception is not None:
        record["exception"] = error.exception
    if error.worker is not None:
        record["worker"] = error.worker
    if headers:
        record["headers"] = dict(headers)
    return json.dumps(record, ensure_ascii=False)


def job_from_row(row: Mapping[str, Any], *, deduplicated: bool = False) -> Job:
    """Build a Job from a row already in Python types.

    Each backend converts its own column types first: times to aware datetimes
    and JSON columns (`payload`, `errors`, `result`) to Python values. A value
    that cannot be read (a row changed outside due) is shown as it is, never
    a reason to refuse to show the job.
    """
    args, kwargs, redact = _readable_arguments(row["payload"])
    return Job(
        id=row["id"],
        task=row["task"],
        queue=row["queue"],
        priority=row["priority"],
        state=JobState(row["state"]),
        args=args,
        kwargs=kwargs,
        run_at=row["run_at"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        lease_expires_at=row["lease_expires_at"],
        worker=row["worker"],
        key=row["key"],
        last_error=row["last_error"],
        errors=_readable_errors(row["errors"]),
        result=row["result"],
        deduplicated=deduplicated,
        schedule=row.get("schedule"),
        scheduled_for=row.get("scheduled_for"),
        cancel_requested=bool(row.get("cancel_requested")),
        checkpoint=row.get("checkpoint"),
        progress=row.get("progress") if isinstance(row.get("progress"), dict) else None,
        stuck=bool(row.get("stuck")),
        parent_id=row.get("parent_id"),
        pieces=Pieces(row["pieces_total"], row["pieces_done"], row["pieces_failed"])
        if row.get("pieces_total")
        else None,
        held=bool(row.get("held")),
        warning=row.get("warning"),
        limits=_readable_limits(row.get("limits")),
        limit_wait=row.get("limit_wait"),
        limit_wait_key=row.get("limit_wait_key") or None,
        workflow_id=row.get("workflow_id"),
        step_name=row.get("step_name"),
        redact=redact,
    )


def _readable_limits(stored: Any) -> tuple[tuple[str, str | None], ...]:
    """A job's limits, stored as JSON text (SQLite) or already read (PostgreSQL)."""
    try:
        pairs = stored if isinstance(stored, list) else decode_job_limits(stored)
        return tuple((str(name), str(key) or None) for name, key in pairs)
    except (ValueError, TypeError):
        return ()


UNREADABLE = "(unreadable)"


def _readable_arguments(
    payload: Any,
) -> tuple[tuple[Any, ...], dict[str, Any], tuple[str | int, ...]]:
    """A stored payload's arguments, and what they are shown without."""
    try:
        if isinstance(payload, str):
            payload = _decoded(payload)
        elif isinstance(payload, bytes):
            payload = json.loads(payload)
        args, kwargs = _arguments(payload)
    except (ValueError, TypeError, RecursionError):
        return (), {UNREADABLE: str(payload)[:500]}, ()
    return args, kwargs, read_stored(payload.get(STORED_KEY))


_ABSENT: Any = object()


def _arguments(payload: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A payload's arguments.

    ValueError when it is not `{"args": [..], "kwargs": {..}}` (either may be
    left out: none).
    """
    if isinstance(payload, str):
        payload = _decoded(payload)
    elif isinstance(payload, bytes):
        payload = json.loads(payload)
    if isinstance(payload, dict):  # a claim reads one per job: no default made per call
        args, kwargs = payload.get("args", _ABSENT), payload.get("kwargs", _ABSENT)
        if isinstance(args, list) and isinstance(kwargs, dict):
            return tuple(args), kwargs
        if args is _ABSENT or kwargs is _ABSENT:
            return _arguments({"args": [], "kwargs": {}, **payload})
    raise ValueError(f"not an object of args (a list) and kwargs (an object): {payload!r:.200}")


_make_scanner = getattr(json.scanner, "c_make_scanner", None)  # None without the C module
_scan_json = _make_scanner(json.JSONDecoder()) if _make_scanner is not None else None
"""The C scanner under `json.loads`, called directly: a claim decodes a payload
per job, and `loads` around it (its checks, a regex for whitespace, three
Python calls) cost as much as the decoding (4.1 against 1.9 us a payload)."""


def _decoded(text: str) -> Any:
    """`json.loads(text)`, the common case (one JSON value, nothing around it) in C."""
    if _scan_json is not None:
        try:
            value, end = _scan_json(text, 0)
        except (StopIteration, ValueError):
            pass  # json.loads says what is wrong
        else:
            if end == len(text):
                return value
    return json.loads(text)


def _readable_errors(errors: Any) -> tuple[AttemptError, ...]:
    if not errors:
        return ()
    if not isinstance(errors, list):
        return (AttemptError(0, f"unreadable error history: {str(errors)[:500]}", None, None),)
    return tuple(
        AttemptError.from_dict(item)
        if isinstance(item, dict)
        # (a history changed outside due, kept by SQLite as a string in a new one)
        else AttemptError(0, f"unreadable error history: {str(item)[:500]}", None, None)
        for item in errors
    )


CLAIM_COLUMNS = (
    "id",
    "task",
    "queue",
    "priority",
    "payload",
    "attempt",
    "max_attempts",
    "lease_token",
    "lease_expires_at",
    "run_at",
    "created_at",
    "scheduled_for",
    "checkpoint",
    "parent_id",
    "completes",
    "pieces_total",
    "workflow_id",
    "schedule",
    "first_attempt",
)
"""What a claim returns, in this order (each backend's claim_jobs), with the
payload and checkpoint as JSON text: decoded here, once, into what the job
needs (a row of tuples is built in a third of the time of a row of dicts)."""


def read_claimed(
    columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> tuple[list[ClaimedJob], list[Completion]]:
    """Claimed rows (tuples in CLAIM_COLUMNS order) as jobs to run, in claim order.

    A row whose stored values cannot be read (changed outside due, or by a bug)
    must not stop the claim of the others: it becomes the failure of its own
    job, with the reason.
    """
    if tuple(columns) != CLAIM_COLUMNS:
        raise RuntimeError(f"a claim returned {tuple(columns)}, not {CLAIM_COLUMNS}")
    claimed: list[ClaimedJob] = []
    unreadable: list[Completion] = []
    for row in rows:
        try:
            claimed.append(_claimed_job(*row))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as error:
            unreadable.append(_unreadable(dict(zip(CLAIM_COLUMNS, row, strict=True)), error))
    # In claim order (priority first, then the oldest due): two sorts in C, the
    # second stable, rather than a key built in Python for each job.
    claimed.sort(key=_DUE_ORDER)
    claimed.sort(key=_PRIORITY, reverse=True)
    return claimed, unreadable


_DUE_ORDER = operator.attrgetter("run_at", "id")
_PRIORITY = operator.attrgetter("priority")


def _claimed_job(
    id: int,
    task: str,
    queue: str,
    priority: int,
    payload: str,
    attempt: int,
    max_attempts: int,
    lease_token: int,
    lease_expires_at: datetime,
    run_at: datetime,
    created_at: datetime,
    scheduled_for: datetime | None,
    checkpoint: str | None,
    parent_id: int | None,
    completes: int | None,
    pieces_total: int,
    workflow_id: int | None = None,
    schedule: str | None = None,
    first_attempt: str | None = None,
) -> ClaimedJob:
    decoded = _decoded(payload) if isinstance(payload, str) else payload
    args, kwargs = _arguments(decoded)
    headers = decoded.get("headers") if type(decoded) is dict else None
    return ClaimedJob(
        id,
        task,
        queue,
        priority,
        args,
        kwargs,
        attempt,
        max_attempts,
        lease_token,
        lease_expires_at,
        run_at,
        created_at,
        scheduled_for,
        None if checkpoint is None else _decoded(checkpoint),
        parent_id,
        completes,
        bool(pieces_total),
        workflow_id,
        schedule,
        _string_headers(headers),
        None if first_attempt is None else _string_headers(_decoded(first_attempt)),
    )


def _string_headers(value: Any) -> dict[str, str] | None:
    """Headers as the attempt hooks take them: an object's string values, or None.

    Values of a row changed by hand into something else are dropped, never
    handed on.
    """
    if type(value) is not dict:
        return None
    return {name: text for name, text in value.items() if type(text) is str} or None


def _unreadable(row: Mapping[str, Any], error: Exception) -> Completion:
    reason = (
        f"its stored arguments could not be read ({type(error).__name__}: {error}); "
        "was the row changed outside due? Correct it, then retry the job"
    )
    record = AttemptError(row["attempt"], reason[:2000], None, None)
    failure = Completion(row["id"], row["lease_token"], JobState.FAILED, error=record)
    failure.settles = bool(
        row["parent_id"] or row["completes"] or row["pieces_total"] or row.get("workflow_id")
    )
    return failure


RETRY_RULE = (
    "only a failed or cancelled job can be retried; not a parent of pieces (retry its "
    "failed pieces while it waits), nor a piece or completion job whose parent has settled"
)


def refusal(job: Job, action: str, rule: str) -> InvalidStateError:
    """The error for an action the job's state does not allow, naming the rule."""
    return InvalidStateError(f"cannot {action} job {job.id}: it is {job.state}; {rule}")


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A registered worker process."""

    id: str
    host: str
    pid: int
    queues: dict[str, int]
    started_at: datetime
    last_seen_at: datetime
    state: str
    stopped_at: datetime | None = None
    tasks: tuple[str, ...] = ()
    """The tasks it knows (what the unknown-task reaper asks of live workers)."""


COUNT_LIMIT = 10_000
"""Queue figures are counted up to this many jobs each; a figure past it is
shown as "10000+" (`QueueOverview.at_least` names it). Counting on would read
every one of ten million jobs scheduled for next month at each look at the
queues; ten thousand index entries take a few milliseconds."""

COUNTED_FIGURES = ("due", "scheduled", "running", "waiting", "retrying", "failed")


@dataclass(frozen=True, slots=True)
class QueueOverview:
    """A queue now: how deep, how late, how it fails, whether paused (`app.queues()`).

    Each count stops at 10,000 (`at_least` names those that reached it), so
    that a look costs the same however many jobs are scheduled ahead.
    """

    name: str
    """The queue's name."""
    queued: int
    """Due now and scheduled for later (`due + scheduled`)."""
    due: int
    """Queued and due now."""
    running: int
    """Running now."""
    waiting: int
    """Parents waiting for their pieces."""
    stuck: int
    """Running, but their progress has not moved for their task's `stuck_after`."""
    oldest_due_at: datetime | None
    """When its oldest due job became due (None when none is due)."""
    paused: bool
    """Paused with `app.pause_queue`, so that no worker starts its jobs."""
    retrying: int = 0
    """Queued again after a failed or lost attempt (waiting out its backoff, or due)."""
    failed: int = 0
    """Failed for good and kept (until pruned), retryable by hand."""
    scheduled: int = 0
    """Queued for later (a delay, a run_at, a retry's backoff still to run)."""
    at_least: frozenset[str] = frozenset()
    """The figures that reached the limit of 10,000 (there are at least that many)."""
    oldest_due_limit: str | None = None
    """The limit that its oldest due job waits for, or None when it waits for none."""
    oldest_due_limit_key: str | None = None
    """The key of that limit, or None for the whole limit."""

    def shown(self, figure: str) -> str:
        """A figure as people read it: "10000+" when there are at least that many.

        Args:
            figure: The name of a count: `queued`, `due`, `scheduled`,
                `running`, `waiting`, `retrying`, `failed`.

        Returns:
            The count as text.
        """
        value = getattr(self, figure)
        return f"{value}+" if figure in self.at_least else str(value)


def queue_overviews(
    rows: list[dict[str, Any]],
    paused: Mapping[str, bool],
    known: Iterable[str],
    limit: int = COUNT_LIMIT,
) -> list[QueueOverview]:
    """Every queue, from the per-queue counts of a backend's `queue_overview`.

    The rows are in Python types, each count read up to `limit + 1`; with them
    come the paused states, and the names known without jobs.
    """
    by_name = {row["queue"]: row for row in rows}
    names = sorted(set(by_name) | set(paused) | set(known))
    return [_overview(name, by_name.get(name), paused.get(name, False), limit) for name in names]


def _overview(name: str, row: dict[str, Any] | None, paused: bool, limit: int) -> QueueOverview:
    if row is None:
        return QueueOverview(name, 0, 0, 0, 0, 0, None, paused)
    counts = {figure: min(row[figure], limit) for figure in COUNTED_FIGURES}
    at_least = {figure for figure in COUNTED_FIGURES if row[figure] > limit}
    if at_least & {"due", "scheduled"}:
        at_least.add("queued")
    oldest_due, waits_for, key = row["oldest_due"], None, None
    limited = row.get("limited_oldest_due")
    if limited is not None and (oldest_due is None or limited <= oldest_due):
        oldest_due, waits_for = limited, row.get("limited_oldest_wait")
        key = row.get("limited_oldest_wait_key") if waits_for else None
    return QueueOverview(
        name,
        counts["due"] + counts["scheduled"],
        counts["due"],
        counts["running"],
        counts["waiting"],
        row["stuck"],
        oldest_due,
        paused,
        counts["retrying"],
        counts["failed"],
        counts["scheduled"],
        frozenset(at_least),
        waits_for,
        key or None,
    )
