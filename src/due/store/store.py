"""The store: everything `due` asks of its database, one method per operation.

Each method is one short transaction, written once (jobs.py, work.py,
long_work.py, queues.py, schedules.py, registry.py) over a backend
(`sqlite/backend.py`, `postgres/backend.py`) that differs only in its SQL and
its connections. Every write about a running job is fenced by its lease
token; every time comparison uses the store's clock (the injected one, or
the database's own). Names are noun_verb, grouped by what they act on; the
conformance suite (`tests/store/`) runs the same tests on both backends.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Self

from due.core.jobs import Job
from due.core.limits import Limit, LimitKeyOverview, LimitOverview
from due.core.records import (
    COUNT_LIMIT,
    DEFAULT_MAX_LOST_LEASES,
    Action,
    BatchRequest,
    ClaimedJob,
    ClaimRequest,
    Completion,
    HeartbeatReply,
    JobFilter,
    Lease,
    NewJob,
    PieceSpawn,
    QueueOverview,
    RescueResult,
    Retention,
    StepRequest,
    UnknownTaskSweep,
    UnknownTaskSweepResult,
    WorkerInfo,
    WorkerRegistration,
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
from due.core.stats import TaskFigures
from due.store import (
    actions,
    bulk,
    jobs,
    limit_claims,
    limits,
    long_work,
    queues,
    registry,
    schedules,
    stats,
    task_names,
    work,
    workflow_views,
    workflows,
)
from due.store.backend import Backend, ChangeFeed, Lane
from due.store.enqueue_groups import EnqueueGroups
from due.store.thread_groups import ThreadGroups


class Store:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.url = backend.url
        self.single_writer = backend.single_writer
        """True when the database serialises writers (SQLite): the worker then
        folds its acknowledgements into its claims, one commit for both. With
        concurrent writers (PostgreSQL) they run in parallel instead."""
        self._enqueue_groups = EnqueueGroups(functools.partial(jobs.enqueue_together, backend))
        self._thread_groups = ThreadGroups(functools.partial(jobs.enqueue_grouped, backend))

    # --- schema and plumbing --------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply the migrations this version knows; returns the versions applied."""
        return self.backend.migrate()

    def empty(self) -> None:
        """Delete every job, schedule, workflow, figure and record: the database
        as `migrate` left it (due.testing.empty)."""
        self.backend.empty()

    def schema_version(self) -> int | None:
        """The applied schema version, or None when the database has none."""
        return self.backend.schema_version()

    def check_schema(self) -> None:
        """Raise NotMigratedError / SchemaTooNewError unless the schema is current."""
        self.backend.check_schema()

    def now(self) -> datetime:
        """The current instant on the store's clock."""
        return self.backend.now()

    def watch_endings(self) -> ChangeFeed:
        return self.backend.watch_endings()

    def watch_jobs(self) -> ChangeFeed:
        return self.backend.watch_jobs()

    def close(self) -> None:
        """Release connections (also at the end of a `with store:` block)."""
        self.backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- jobs, from producers and operators -------------------------------------

    def job_enqueue(self, new: Sequence[NewJob], connection: Any = None) -> list[Job]:
        """Insert jobs; one job without a key (and on no connection of the
        caller's) is written with those other threads enqueue meanwhile
        (thread_groups.py)."""
        if (
            connection is None
            and len(new) == 1
            and new[0].key is None
            # Inside its own write transaction (SQLite: holding the one writer),
            # a thread in line would wait for a writer that waits for it.
            and not self.backend.writing_on_this_thread()
        ):
            created = self._thread_groups.enqueue(new[0])
            if created is not None:
                return [created]
        return jobs.enqueue(self.backend, new, connection)

    async def job_enqueue_async(self, new: Sequence[NewJob], connection: Any) -> list[Job]:
        return await jobs.enqueue_async(self.backend, new, connection)

    async def job_enqueue_on_loop(self, new: Sequence[NewJob]) -> list[Job] | None:
        """One job without a key, written with those other coroutines of the
        running loop enqueue meanwhile (enqueue_groups.py); None for any other
        batch, or where the loop cannot (take a thread)."""
        if len(new) != 1 or new[0].key is not None:
            return None
        created = await self._enqueue_groups.enqueue(new[0])
        return None if created is None else [created]

    def job_get(self, job_id: int, connection: Any = None) -> Job:
        """The job, or JobNotFoundError; on `connection`, in the caller's transaction."""
        return jobs.get(self.backend, job_id, connection)

    def job_list(self, where: JobFilter) -> list[Job]:
        return jobs.list_jobs(self.backend, where)

    def job_ended(self, job_ids: Sequence[int]) -> list[Job]:
        return jobs.ended(self.backend, job_ids)

    def job_cancel(self, job_id: int) -> Job:
        return jobs.cancel(self.backend, job_id)

    def job_retry(self, job_id: int, run_now: bool = False) -> Job:
        return jobs.retry(self.backend, job_id, run_now)

    def job_retry_many(
        self,
        where: JobFilter,
        run_now: bool = False,
        *,
        batch_size: int = bulk.DEFAULT_BATCH_SIZE,
        on_batch: bulk.OnBatch | None = None,
    ) -> int:
        """Retry what `where` matches, a batch per transaction (bulk.py); the count."""
        return bulk.retry_many(
            self.backend, where, run_now, batch_size=batch_size, on_batch=on_batch
        )

    def job_count_many(self, action: str, where: JobFilter, cap: int | None = None) -> int:
        """How many jobs `action` ("retry" or "cancel") would act on by `where`:
        counted in the database, no further than `cap` (bulk.count)."""
        return bulk.count(self.backend, action, where, cap)

    def job_cancel_many(
        self,
        where: JobFilter,
        *,
        batch_size: int = bulk.DEFAULT_BATCH_SIZE,
        on_batch: bulk.OnBatch | None = None,
    ) -> int:
        """Cancel what `where` matches, a batch per transaction (bulk.py); the count."""
        return bulk.cancel_many(self.backend, where, batch_size=batch_size, on_batch=on_batch)

    def job_prune(self, retention: Retention, limit: int = 10_000) -> tuple[int, int]:
        return jobs.prune(self.backend, retention, limit)

    # --- jobs, from workers -------------------------------------------------------

    def job_claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        return work.claim(self.backend, request)

    def job_complete_and_claim(
        self, completions: Sequence[Completion], request: ClaimRequest
    ) -> tuple[set[int], list[ClaimedJob]]:
        return work.complete_and_claim(self.backend, completions, request)

    def loop_lane(self, connections: int) -> Lane | None:
        """Connections for claims and acknowledgements from a worker's event loop
        (PostgreSQL), to open and close in that loop; None on SQLite."""
        return self.backend.loop_lane(connections)

    async def job_claim_on_loop(self, lane: Lane, request: ClaimRequest) -> list[ClaimedJob]:
        return await work.claim_on_loop(self.backend, lane, request)

    async def job_complete_on_loop(
        self, lane: Lane, completions: Sequence[Completion]
    ) -> set[int] | None:
        """The ids recorded (as job_complete), or None: this batch takes the thread
        path (job_complete)."""
        return await work.complete_on_loop(self.backend, lane, completions)

    def job_heartbeat(self, leases: Sequence[Lease]) -> HeartbeatReply:
        return work.heartbeat(self.backend, leases)

    def job_complete(self, completions: Sequence[Completion]) -> set[int]:
        return work.complete(self.backend, completions)

    def job_rescue(
        self, limit: int = 1000, max_lost_leases: int = DEFAULT_MAX_LOST_LEASES
    ) -> RescueResult:
        return work.rescue(self.backend, limit, max_lost_leases)

    def job_release(
        self,
        leases: Sequence[Lease],
        reason: str,
        later: Collection[int] = (),
        handback_seconds: float = work.DEFAULT_HANDBACK_SECONDS,
        *,
        limits: Mapping[int, str] | None = None,
    ) -> set[int]:
        return work.release(self.backend, leases, reason, later, handback_seconds, limits=limits)

    def job_next_due(
        self, queue: str, tasks: Sequence[str], limited: bool = False
    ) -> datetime | None:
        return work.next_due(self.backend, queue, tasks, limited=limited)

    def job_fail_unknown_tasks(self, sweep: UnknownTaskSweep) -> UnknownTaskSweepResult:
        return work.fail_unknown_tasks(self.backend, sweep)

    # --- long work -----------------------------------------------------------------

    def checkpoint_save(
        self, job_id: int, token: int, value: str, connection: Any = None
    ) -> bool | None:
        return long_work.save_checkpoint(self.backend, job_id, token, value, connection)

    async def checkpoint_save_async(
        self, job_id: int, token: int, value: str, connection: Any
    ) -> bool | None:
        return await long_work.save_checkpoint_async(self.backend, job_id, token, value, connection)

    def piece_spawn(self, request: PieceSpawn) -> int | None:
        return long_work.spawn(self.backend, request)

    def batch_create(self, request: BatchRequest) -> int:
        return long_work.batch(self.backend, request)

    def job_transaction(
        self, job_id: int, token: int, progress: str | None
    ) -> AbstractContextManager[Any]:
        return long_work.job_transaction(self.backend, job_id, token, progress)

    def job_complete_on(
        self, job_id: int, token: int, progress: str | None, connection: Any
    ) -> None:
        """Record a running job's success (fenced) in the caller's open transaction."""
        long_work.complete_on_connection(self.backend, job_id, token, progress, connection)

    def group_hold(self, parent: int, held: bool) -> None:
        long_work.hold_group(self.backend, parent, held)

    # --- figures (counts and durations that survive pruning) ------------------------

    def stats_figures(self) -> list[TaskFigures]:
        return stats.figures(self.backend)

    def stats_fold(self) -> None:
        stats.fold(self.backend)

    def job_recent_failures(self, since: datetime) -> list[dict[str, Any]]:
        return stats.recent_failures(self.backend, since)

    def stats_throughput(self, until: datetime, minutes: int = 60) -> dict[str, list[int]]:
        return actions.throughput(self.backend, until, minutes)

    # --- actions by hand -------------------------------------------------------------

    def action_record(
        self,
        action: str,
        by: str,
        *,
        job_id: int | None = None,
        schedule: str | None = None,
        queue: str | None = None,
    ) -> None:
        actions.record(self.backend, action, by, job_id=job_id, schedule=schedule, queue=queue)

    def action_history(
        self,
        *,
        job_id: int | None = None,
        schedule: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Action]:
        return actions.history(
            self.backend, job_id=job_id, schedule=schedule, queue=queue, limit=limit
        )

    # --- queues ----------------------------------------------------------------------

    def queue_pause(self, queue: str, paused: bool) -> None:
        queues.pause(self.backend, queue, paused)

    def queue_overview(self, limit: int = COUNT_LIMIT) -> list[QueueOverview]:
        return queues.overview(self.backend, limit)

    def queue_unknown_oldest(
        self, oldest: Sequence[tuple[str, datetime]], alive_seconds: float
    ) -> dict[str, str]:
        return queues.unknown_oldest(self.backend, oldest, alive_seconds)

    def queue_in_use(self, queue: str) -> bool:
        return queues.in_use(self.backend, queue)

    def job_vacuum_if_needed(self) -> dict[str, Any] | None:
        return jobs.vacuum_if_needed(self.backend)

    def queue_due_names(self) -> list[str]:
        return work.due_queues(self.backend)

    # --- tasks -----------------------------------------------------------------------

    def task_in_use(self, task: str) -> bool:
        """Whether a schedule, a worker or a stored job names this task."""
        return task_names.in_use(self.backend, task)

    def task_names(self) -> list[str]:
        """Every task name a schedule, a worker or a stored job holds, sorted."""
        return task_names.known(self.backend)

    # --- workflows -------------------------------------------------------------------

    def workflow_enqueue(self, name: str, steps: Sequence[StepRequest]) -> tuple[int, list[int]]:
        return workflows.enqueue(self.backend, name, steps)

    def workflow_status(
        self, workflow_id: int
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        return workflows.status(self.backend, workflow_id)

    def workflow_add(
        self, adder: int, token: int, steps: Sequence[StepRequest]
    ) -> list[int] | None:
        return workflows.add(self.backend, adder, token, steps)

    def workflow_cancel(self, workflow_id: int) -> tuple[list[int], list[int]] | None:
        return workflows.cancel(self.backend, workflow_id)

    def workflow_retry(self, workflow_id: int) -> list[int] | None:
        return workflows.retry(self.backend, workflow_id)

    def job_upstream(self, job_id: int) -> list[dict[str, Any]]:
        return workflows.upstream_of(self.backend, job_id)

    def workflow_recent(self, limit: int = COUNT_LIMIT) -> list[dict[str, Any]]:
        return workflow_views.recent(self.backend, limit)

    def workflow_stuck(self, limit: int = COUNT_LIMIT) -> list[dict[str, Any]]:
        return workflow_views.stuck(self.backend, limit)

    # --- limits ----------------------------------------------------------------------

    def limit_sync(self, defined: Sequence[Limit]) -> None:
        limits.sync(self.backend, defined)

    def limit_set(self, limit: Limit) -> bool:
        return limits.set_numbers(self.backend, limit)

    def limit_reset(self, name: str) -> bool:
        return limits.reset_numbers(self.backend, name)

    def limit_overview(self) -> list[LimitOverview]:
        return limits.overview(self.backend)

    def limit_key(self, name: str, key: str) -> tuple[Limit, LimitKeyOverview] | None:
        return limits.key_figures(self.backend, name, key)

    def limit_reopen(self) -> int:
        """Look at every waiting key (a page of them) and let go the jobs of
        those with room; returns how many (the worker's sweep, and drain())."""
        return limit_claims.sweep(self.backend)

    def schedule_sync(self, defined: Sequence[Schedule], decide: Decide) -> SyncReport:
        return schedules.sync(self.backend, defined, decide)

    def schedule_prune(self, defined: Sequence[str], decide: Decide) -> list[str]:
        return schedules.prune(self.backend, defined, decide)

    def schedule_add(self, schedule: Schedule) -> None:
        schedules.add(self.backend, schedule)

    def schedule_remove(self, name: str) -> bool:
        return schedules.remove(self.backend, name)

    def schedule_pause(self, name: str, paused: bool) -> bool:
        return schedules.pause(self.backend, name, paused)

    def schedule_list(self) -> list[StoredSchedule]:
        return schedules.list_all(self.backend)

    def schedule_overview(self) -> list[ScheduleOverview]:
        return schedules.overview(self.backend)

    def schedule_runs(self, name: str, limit: int = 50) -> list[ScheduleRun]:
        return schedules.runs(self.backend, name, limit)

    def schedule_runs_since(self, name: str, since: datetime) -> list[ScheduleRun]:
        return schedules.runs_since(self.backend, name, since)

    def schedule_due_names(self) -> list[str]:
        return schedules.due_names(self.backend)

    def schedule_next_fire(self) -> datetime | None:
        return schedules.next_fire(self.backend)

    def schedule_materialize(
        self, name: str, decide: Decide, fence: LeaseFence | None = None
    ) -> Materialised | None:
        return schedules.materialize(self.backend, name, decide, fence)

    def schedule_names_with_pending_runs(self) -> list[str]:
        return schedules.with_pending_runs(self.backend)

    def schedule_start_pending_run(self, name: str, fence: LeaseFence | None = None) -> int | None:
        return schedules.start_pending_run(self.backend, name, fence)

    def schedule_trigger(self, name: str) -> int:
        return schedules.trigger(self.backend, name)

    # --- leases and workers -------------------------------------------------------------

    def lease_acquire(self, name: str, holder: str, ttl: float) -> int | None:
        return registry.acquire_lease(self.backend, name, holder, ttl)

    def lease_renew(self, name: str, holder: str, token: int, ttl: float) -> bool:
        return registry.renew_lease(self.backend, name, holder, token, ttl)

    def lease_release(self, name: str, holder: str, token: int) -> None:
        registry.release_lease(self.backend, name, holder, token)

    def worker_register(self, registration: WorkerRegistration) -> None:
        registry.register_worker(self.backend, registration)

    def worker_touch(self, worker: str) -> bool:
        """False when the worker is not registered (pruned while silent)."""
        return registry.touch_worker(self.backend, worker)

    def worker_set_state(self, worker: str, state: str, recycled: str | None = None) -> None:
        """Record `stopping` or `stopped`, and count a recycling (its reason)."""
        registry.set_worker_state(self.backend, worker, state, recycled)

    def worker_recycles(self) -> dict[str, int]:
        """Worker processes that recycled themselves, ever, by reason."""
        return registry.worker_recycles(self.backend)

    def worker_mark_gone(self, after_seconds: float) -> list[str]:
        return registry.mark_gone_workers(self.backend, after_seconds)

    def worker_list(self, limit: int = 100) -> list[WorkerInfo]:
        return registry.list_workers(self.backend, limit)

    def worker_live_by_queue(self, alive_seconds: float) -> dict[str, int]:
        return stats.live_workers(self.backend, alive_seconds)

    def worker_running_counts(self) -> dict[str, int]:
        return stats.running_per_worker(self.backend)
