"""The store protocol: everything `due` asks of a database.

Two implementations, `store.sqlite` and `store.postgres`, keep their SQL in
one `queries.sql` each, under the same query names, and pass one conformance
suite (`tests/store/`). Every method is one short transaction; every write
about a running job is fenced by its lease token; every time comparison uses
the store's clock (`Clock.now()`, or the database's own when that is None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from due.job import Job
from due.store.records import (
    ClaimedJob,
    Completion,
    HeartbeatReply,
    JobFilter,
    Lease,
    NewJob,
    RescueResult,
    WorkerInfo,
)

DEFAULT_MAX_LOST_LEASES = 3
"""A job that lost its lease this many times in a row is failed, not retried:
its worker keeps dying while running it (out of memory, a segfault)."""


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
        """`complete` then `claim`, in one transaction (one round trip, one commit)."""

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
        self, queues: Sequence[str], tasks: Sequence[str], grace_seconds: float
    ) -> list[int]:
        """Fail queued jobs of tasks outside `tasks` that stayed due past the grace."""

    # --- worker registry ----------------------------------------------------

    def register_worker(self, worker: str, host: str, pid: int, queues: Mapping[str, int]) -> None:
        """Record a worker process as running."""

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

    def list_jobs(self, where: JobFilter) -> list[Job]:
        """Jobs matching the filter, newest first."""

    def cancel(self, job_id: int) -> Job:
        """Cancel a queued job."""

    def retry(self, job_id: int) -> Job:
        """Queue a failed or cancelled job again, with a fresh set of attempts."""

    def due_queues(self) -> list[str]:
        """Names of the queues that hold jobs due now."""

    def now(self) -> datetime:
        """The current instant on the store's clock."""

    def close(self) -> None:
        """Release connections."""
