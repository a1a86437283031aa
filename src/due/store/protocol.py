"""The store protocol: everything `due` asks of a database.

Two implementations, `store.sqlite` and `store.postgres`, keep their SQL in
one `queries.sql` each, under the same query names, and pass one conformance
suite (`tests/store/`). Every method is one short transaction; every write
about a running job is fenced by its lease token; every time comparison uses
the store's clock (`Clock.now()`, or the database's own when that is None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, Self

from due.core.jobs import Job
from due.core.records import (
    ClaimedJob,
    Completion,
    HeartbeatReply,
    JobFilter,
    Lease,
    NewJob,
    QueueOverview,
    RescueResult,
    WorkerInfo,
)
from due.core.schedules import (
    Decide,
    LeaseFence,
    Materialised,
    Schedule,
    ScheduleOverview,
    ScheduleRun,
    StoredSchedule,
    SyncReport,
)

DEFAULT_MAX_LOST_LEASES = 3
"""A job that lost its lease this many times in a row is failed, not retried:
its worker keeps dying while running it (out of memory, a segfault)."""


DEFAULT_ALIVE_SECONDS = 30.0
"""A worker seen within this long counts as live (3 leases of the default 10 s)."""


class ChangeFeed(Protocol):
    """Tells a waiting thread that something it waits for may have happened."""

    def wait(self, timeout: float) -> bool:
        """Whether something may have changed, waiting up to `timeout` seconds to
        hear of it. The first call says True at once (nothing was watched before it)."""

    def close(self) -> None: ...


class Store(Protocol):
    url: str
    single_writer: bool
    """True when the database serialises writers (SQLite): the worker then
    folds its acknowledgements into its claims, one commit for both. With
    concurrent writers (PostgreSQL) they run in parallel instead."""

    # --- schema ---------------------------------------------------------
    def migrate(self) -> list[int]:
        """Apply the migrations this version knows; returns the versions applied."""

    def schema_version(self) -> int | None:
        """The applied schema version, or None when the database has none."""

    def check_schema(self) -> None:
        """Raise NotMigratedError / SchemaTooNewError unless the schema is current."""

    # --- producers ------------------------------------------------------
    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Job]:
        """Insert jobs (deduplicating on keys); on `connection`, inside its transaction."""

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[Job]:
        """`enqueue` on a caller's async connection (psycopg AsyncConnection)."""

    # --- workers ----------------------------------------------------------
    def claim(
        self,
        queue: str,
        limit: int,
        worker: str,
        lease_seconds: float,
        tasks: Sequence[str] | None = None,
        task_leases: Mapping[str, float] | None = None,
    ) -> list[ClaimedJob]:
        """Lease up to `limit` due jobs of `queue` (only `tasks` when given)."""

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
        """`complete` then `claim`. A single-writer store (SQLite) does both in one
        transaction, one commit; the worker calls this only on such a store."""

    def heartbeat(self, leases: Sequence[Lease]) -> HeartbeatReply:
        """Extend the leases still held; report the lost ones."""

    def complete(self, completions: Sequence[Completion]) -> set[int]:
        """Record the end of attempts; returns the ids whose token was still current."""

    def rescue(
        self, limit: int = 1000, max_lost_leases: int = DEFAULT_MAX_LOST_LEASES
    ) -> RescueResult:
        """Requeue (or fail) running jobs whose lease has expired."""

    def release(self, leases: Sequence[Lease], reason: str) -> set[int]:
        """Hand back running jobs, due again at once, their attempt not counted."""

    def next_due(self, queue: str, tasks: Sequence[str]) -> datetime | None:
        """When the next queued job of `tasks` in `queue` is due."""

    def fail_unknown_tasks(
        self,
        queues: Sequence[str],
        tasks: Sequence[str],
        grace_seconds: float,
        alive_seconds: float = DEFAULT_ALIVE_SECONDS,
    ) -> list[int]:
        """Fail queued jobs of `queues` that stayed due past the grace while neither
        the caller (which knows `tasks`) nor any live worker of their queue knew
        their task (live: running or stopping, seen within `alive_seconds`)."""

    # --- long work ------------------------------------------------------------

    def save_checkpoint(
        self, job_id: int, token: int, value: str, connection: Any = None
    ) -> bool | None:
        """Save a running job's cursor (fenced): None if the lease is lost, else
        whether its cancellation was requested. On `connection`, inside the
        caller's open transaction (so it commits with the caller's writes)."""

    async def save_checkpoint_async(
        self, job_id: int, token: int, value: str, connection: Any
    ) -> bool | None:
        """`save_checkpoint` on a caller's async connection (psycopg AsyncConnection)."""

    def spawn(
        self,
        parent: int,
        token: int,
        jobs: Sequence[NewJob],
        on_complete: str | None,
        on_piece_failure: str | None,
    ) -> int | None:
        """Add pieces under a running parent (fenced), each known by its task and
        arguments (see pieces.piece_keys): None if the parent's lease is lost, else
        how many were new. None for on_complete or the policy keeps what was set."""

    def batch(
        self, name: str, jobs: Sequence[NewJob], on_complete: str | None, on_piece_failure: str
    ) -> int:
        """A waiting parent with these pieces (outside any job); returns its id."""

    def job_transaction(
        self, job_id: int, token: int, progress: str | None
    ) -> AbstractContextManager[Any]:
        """A transaction on the job's database whose commit also records the job's
        success, fenced (LeaseLost rolls it all back)."""

    def pause_queue(self, queue: str, paused: bool) -> None: ...

    def hold_group(self, parent: int, held: bool) -> None:
        """Pause or resume a parent's queued pieces (and those it adds later)."""

    def queue_overview(self) -> list[QueueOverview]:
        """Every queue with jobs (active or failed), paused, served or scheduled."""

    def queue_in_use(self, queue: str) -> bool:
        """Whether any job, pause, worker or schedule names this queue."""

    # --- schedules (see due.scheduler) ----------------------------------------

    def sync_schedules(self, schedules: Sequence[Schedule]) -> SyncReport:
        """Add, change, and disable code-defined schedules to match `schedules`."""

    def add_schedule(self, schedule: Schedule) -> None:
        """Store a schedule defined at run time (ConfigurationError if the name exists)."""

    def remove_schedule(self, name: str) -> bool:
        """Delete a schedule (its run history stays); False when there was none."""

    def pause_schedule(self, name: str, paused: bool) -> bool:
        """Pause or resume; False when there is no such schedule."""

    def list_schedules(self) -> list[StoredSchedule]: ...

    def schedule_overview(self) -> list[ScheduleOverview]: ...

    def schedule_runs(self, name: str, limit: int = 50) -> list[ScheduleRun]: ...

    def due_schedule_names(self) -> list[str]:
        """Enabled schedules whose next fire time has come."""

    def next_schedule_fire(self) -> datetime | None:
        """The earliest next fire time of any enabled schedule."""

    def materialize(
        self, name: str, decide: Decide, fence: LeaseFence | None = None
    ) -> Materialised | None:
        """Record and start a schedule's due runs, in one transaction; None if not ours."""

    def schedules_with_pending_runs(self) -> list[str]: ...

    def start_pending_run(self, name: str, fence: LeaseFence | None = None) -> int | None:
        """Start the oldest run waiting for its previous one, if that one has ended."""

    def trigger_schedule(self, name: str) -> int:
        """Start a run now (by hand); returns its job id."""

    # --- leases -------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: float) -> int | None:
        """Take or renew the lease `name`; its token (the term), or None if held by another."""

    def renew_lease(self, name: str, holder: str, token: int, ttl: float) -> bool: ...

    def release_lease(self, name: str, holder: str, token: int) -> None: ...

    # --- worker registry ----------------------------------------------------

    def register_worker(
        self,
        worker: str,
        host: str,
        pid: int,
        queues: Mapping[str, int],
        tasks: Sequence[str] = (),
    ) -> None:
        """Record a worker process as running, with the queues it serves and the
        tasks it knows."""

    def touch_worker(self, worker: str) -> None:
        """Record that a worker is alive."""

    def set_worker_state(self, worker: str, state: str) -> None:
        """Record `stopping` or `stopped`."""

    def mark_gone_workers(self, after_seconds: float) -> list[str]:
        """Mark workers silent for `after_seconds` as gone."""

    def list_workers(self, limit: int = 100) -> list[WorkerInfo]:
        """Registered workers, newest first."""

    # --- inspection and control --------------------------------------------
    def get(self, job_id: int) -> Job:
        """The job, or JobNotFoundError."""

    def ended_jobs(self, job_ids: Sequence[int]) -> list[Job]:
        """Those of these jobs that have ended (succeeded, failed or cancelled)."""

    def watch_endings(self) -> ChangeFeed:
        """A feed that wakes when a job may have ended (PostgreSQL: a notification
        sent by the ending transaction; SQLite: any commit)."""

    def list_jobs(self, where: JobFilter) -> list[Job]:
        """Jobs matching the filter, newest first."""

    def cancel(self, job_id: int) -> Job:
        """Cancel a queued job."""

    def retry(self, job_id: int, run_now: bool = False) -> Job:
        """Queue a failed or cancelled job again, with a fresh set of attempts: due
        now, or at its own run_at while that is still to come (unless run_now)."""

    def due_queues(self) -> list[str]:
        """Names of the queues that hold jobs due now."""

    def prune(self, retention_seconds: float, limit: int = 10_000) -> tuple[int, int]:
        """Delete finished jobs and schedule runs older than the retention (never the
        newest job); returns (jobs, runs) deleted."""

    def now(self) -> datetime:
        """The current instant on the store's clock."""

    def close(self) -> None:
        """Release connections (also at the end of a `with store:` block)."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...
