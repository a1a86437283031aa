"""The worker: an asyncio process that claims, runs and acknowledges jobs.

    producers (one per queue) ──claim──► start ──► executor ──► completer ──► store
                     ▲                                │
        wake-ups, slots freed, due times         heartbeater (leases, trust deadline)
                                                 rescuer, unknown-task reaper

Guarantees and what happens when things fail:

- A job runs only while this worker holds its lease. Heartbeats renew every
  lease in one statement; a lease the store no longer holds, or one that could
  not be renewed before its trust deadline, is lost: an async handler is
  cancelled at its next `await`, a sync handler's result is discarded, and
  nothing more is written for the job (writes are fenced by the token anyway).
- Each queue has its own slots: a flood on one queue never takes another's.
- On SIGTERM/SIGINT the worker stops claiming, lets running jobs finish for
  the grace period, then releases the rest (due again at once, attempt not
  counted) so another worker takes them without waiting for the lease; a
  second signal releases at once. Pending acknowledgements are always written
  before exit.
- A database outage is ridden out: every loop retries with backoff; leases
  that cannot be renewed in time are given up, and rescued elsewhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from due.app import App
from due.clock import Clock
from due.core.records import (
    ClaimedJob,
    ClaimRequest,
    Completion,
    HeartbeatReply,
    Lease,
    WorkerRegistration,
)
from due.errors import StoreError, StoreUnavailableError
from due.logs import event
from due.maintenance.pruner import Pruner
from due.maintenance.rescuer import Rescuer
from due.scheduler.leader import DatabaseLeases, Leadership, RedisLeases
from due.scheduler.service import Scheduler
from due.service import run_forever, wait_for_any
from due.worker.calls import StoreCalls
from due.worker.completer import Completer
from due.worker.executor import Attempt, Executor
from due.worker.heartbeat import Heartbeater, TrustWatch
from due.worker.producer import QueueProducer
from due.worker.running import RunningJob, trusted_until
from due.worker.settings import MAX_CLAIM_BATCH, WorkerSettings
from due.worker.unknown_tasks import UnknownTaskReaper
from due.worker.wakeups import Wakeups

log = logging.getLogger("due.worker")


class Worker:
    def __init__(self, app: App, settings: WorkerSettings, *, clock: Clock | None = None) -> None:
        self.app = app
        self.settings = settings
        self.clock = clock or app.clock
        self.store = app.store  # refuses an unknown or missing schema
        self.task_names = app.tasks.names()
        self.task_leases = {t.name: t.config.lease for t in app.tasks if t.config.lease}
        self.running: dict[int, RunningJob] = {}
        self.producers = {q: QueueProducer(self, q, n) for q, n in settings.queues.items()}
        self.completer = Completer(self)
        self.heartbeater = Heartbeater(self)
        self.trust_watch = TrustWatch(self)
        self.rescuer = Rescuer(self)
        self.unknown_tasks = UnknownTaskReaper(self)
        self.scheduler = self._scheduler() if settings.scheduler else None
        self.pruner = Pruner(self)
        self.stopping = False
        self.call = StoreCalls(settings.db_threads, "due-db")
        self._heartbeat_call = StoreCalls(1, "due-heartbeat")
        self._handler_threads = concurrent.futures.ThreadPoolExecutor(
            settings.total_concurrency, thread_name_prefix="due-task"
        )
        self.executor = Executor(app.tasks, self.clock, threads=self._handler_threads, app=app)
        self._database_offset = timedelta(0)

        self._wakes: dict[str, asyncio.Event] = {}
        self._stop_requested: asyncio.Event | None = None
        self._hard_stop: asyncio.Event | None = None

    def _scheduler(self) -> Scheduler:
        url = self.settings.leader_url
        backend = RedisLeases(url) if url else DatabaseLeases(self.store)
        leadership = Leadership(
            backend, self.settings.worker_id, self.clock, ttl=self.settings.leader_ttl
        )
        return Scheduler(self, leadership)

    # --- the store, from the loop --------------------------------------------

    def _claim_request(self, queue: str, limit: int) -> ClaimRequest:
        return ClaimRequest(
            queue,
            limit,
            self.settings.worker_id,
            self.settings.lease,
            self.task_names,
            self.task_leases,
        )

    async def claim(self, queue: str, limit: int) -> list[ClaimedJob]:
        """Claim jobs; with a single-writer store, the pending acks ride along."""
        if not self.store.single_writer:
            return await self.call(self.store.job_claim, self._claim_request(queue, limit))
        acks = self.completer.take()
        # Slots the carried acks free are free once the claim commits with them.
        producer = self.producers[queue]
        freed = producer.slots_freed_by_writing(sum(1 for r, _ in acks if r.queue == queue))
        try:
            applied, jobs = await self.call(
                self.store.job_complete_and_claim,
                [completion for _, completion in acks],
                self._claim_request(queue, min(limit + freed, MAX_CLAIM_BATCH)),
            )
        except BaseException:
            self.completer.give_back(acks)
            raise
        self.completer.acknowledge(acks, applied)
        return jobs

    async def next_due(self, queue: str) -> datetime | None:
        return await self.call(self.store.job_next_due, queue, self.task_names)

    async def complete(self, completions: Sequence[Completion]) -> set[int]:
        return await self.call(self.store.job_complete, completions)

    async def heartbeat(self, leases: Sequence[Lease], deadline: float) -> HeartbeatReply:
        return await self._heartbeat_call.within(deadline, self.store.job_heartbeat, leases)

    async def touch(self, deadline: float) -> None:
        await self._heartbeat_call.within(
            deadline, self.store.worker_touch, self.settings.worker_id
        )

    def database_now(self) -> datetime:
        """The database's clock, estimated from this host's (offset measured at start)."""
        return self.clock.now() or (self.clock.wall() + self._database_offset)

    # --- jobs ----------------------------------------------------------------

    def held(self) -> list[RunningJob]:
        """Jobs whose lease this worker holds (running, or awaiting their ack)."""
        return list(self.running.values())

    def start(self, job: ClaimedJob, producer: QueueProducer, claimed_at: float) -> None:
        """Hold a job just claimed; its producer runs it now or when a slot frees."""
        task = self.app.tasks.get(job.task)
        lease = task.config.lease or self.settings.lease
        running = RunningJob(job, task, producer.queue, lease, trusted_until(claimed_at, lease))
        running.context = self.executor.context_for(job)
        if running.context is not None:
            running.context.trusted = lambda: self._trusts(running)
        self.running[job.id] = running
        producer.add(running)

    def _trusts(self, running: RunningJob) -> bool:
        return self.clock.monotonic() <= running.trusted_until

    def launch(self, running: RunningJob, producer: QueueProducer) -> None:
        job = running.job
        event(log, "job.started", logging.DEBUG, job=job.id, task=job.task, attempt=job.attempt)
        running.handle = asyncio.create_task(self._execute(running, producer))

    async def _execute(self, running: RunningJob, producer: QueueProducer) -> None:
        try:
            attempt = await self.executor.run(
                running.job, running.context, lambda: self._trusts(running)
            )
        except asyncio.CancelledError:
            # The outcome is queued before the slot frees: it keeps the slot until written.
            if _completed_in_transaction(running):
                self.forget(running)  # its success is written; the token moved on with it
            elif running.cancel_requested and not running.lost:
                running.finished = True
                self.completer.add(running, self.executor.cancelled(running.job, running.context))
            self._handler_ended(running, producer)
            return  # otherwise the lease was lost or released: write nothing
        except Exception as error:
            # The executor turns every end into an outcome; should it fail, the job
            # still gets one (failed with the reason), never stays running.
            log.exception("job.executor_crashed job=%s", running.job.id)
            running.finished = True
            if not running.lost:
                self.completer.add(running, self.executor.crashed(running.job, error))
            self._handler_ended(running, producer)
            return
        running.seconds = attempt.seconds
        if attempt.straggler is None:
            running.finished = True
            # The outcome is queued before the slot frees: it keeps the slot until written.
            self._queue_outcome(running, attempt)
            self._handler_ended(running, producer, attempt.seconds)
            return
        # A sync handler past its timeout keeps its thread, its slot and its lease
        # (heartbeats go on): the timeout is written when the thread returns, so the
        # retry cannot start while this attempt still runs.
        running.straggler = attempt.straggler
        event(
            log,
            "job.thread_still_running",
            logging.WARNING,
            job=running.job.id,
            task=running.job.task,
            timeout=running.task.config.timeout,
        )
        attempt.straggler.add_done_callback(
            lambda _: self._straggler_returned(running, producer, attempt)
        )

    def _straggler_returned(
        self, running: RunningJob, producer: QueueProducer, attempt: Attempt
    ) -> None:
        straggler = attempt.straggler
        if straggler is not None and not straggler.cancelled():
            straggler.exception()  # its late end, success or error, is discarded
        running.finished = True
        self._queue_outcome(running, attempt)
        self._handler_ended(running, producer)

    def _queue_outcome(self, running: RunningJob, attempt: Attempt) -> None:
        if attempt.lease_lost:
            self.lease_lost(running, "a fenced write found the lease taken")
        if running.lost:
            event(
                log,
                "job.result_discarded",
                logging.WARNING,
                job=running.job.id,
                task=running.job.task,
                reason=running.lost_reason,
            )
            return
        if attempt.completion is None:  # its own transaction recorded its success
            self.forget(running)
            job = running.job
            duration_ms = round(attempt.seconds * 1000, 1)
            event(
                log,
                "job.succeeded",
                logging.INFO,
                job=job.id,
                task=job.task,
                queue=job.queue,
                attempt=job.attempt,
                duration_ms=duration_ms,
            )
            return
        self.completer.add(running, attempt.completion)

    def _handler_ended(
        self, running: RunningJob, producer: QueueProducer, seconds: float | None = None
    ) -> None:
        producer.slot_freed(seconds)

    def lease_lost(self, running: RunningJob, reason: str, level: int = logging.WARNING) -> None:
        """Stop a job at its next safe point and write nothing more for it."""
        if running.lost:
            return
        if running.context is not None:
            if running.context.completed_in_transaction:
                return  # its success is written; the token moved on with it
            running.context.lease_lost = True
        running.lost_reason = reason
        self.forget(running)
        job = running.job
        event(
            log,
            "job.lease_lost",
            level,
            job=job.id,
            task=job.task,
            attempt=job.attempt,
            reason=reason,
        )
        if running.handle is None:
            self.producers[running.queue].discard_ready(running)  # never started
        elif running.task.is_async and not running.finished:
            running.handle.cancel()  # raises CancelledError at the handler's next await

    def request_job_cancel(self, job_id: int, via: str) -> None:
        """Someone asked a job this worker runs to stop.

        Not started yet (claimed ahead): it ends cancelled at once. An async
        handler with a context gets one heartbeat interval to stop at a safe point
        (its `finally` blocks run either way), then is cancelled at its next
        `await`; one without a context is cancelled at once. A sync handler stops
        at its next safe point (`ctx.progress`, `ctx.checkpoint`,
        `ctx.raise_if_cancelled`); one without any runs to its end, and that
        outcome stands.
        """
        running = self.running.get(job_id)
        if running is None or running.cancel_requested or running.lost or running.finished:
            return
        running.cancel_requested = True
        if running.context is not None:
            running.context.cancel_requested = True
        job = running.job
        event(log, "job.cancel_requested", job=job.id, task=job.task, via=via)
        if running.handle is None:
            self.producers[running.queue].discard_ready(running)
            running.finished = True
            self.completer.add(running, self.executor.cancelled(job, running.context))
        elif running.task.is_async:
            grace = 0.0 if running.context is None else self.heartbeater.interval()
            asyncio.get_running_loop().call_later(grace, self._hard_cancel, running)

    def _hard_cancel(self, running: RunningJob) -> None:
        if running.handle is None or running.finished or running.lost:
            return
        if _completed_in_transaction(running):
            return  # it succeeded already; let it return
        running.handle.cancel()

    def forget(self, running: RunningJob) -> None:
        if self.running.get(running.job.id) is running:
            del self.running[running.job.id]

    # --- wake-ups --------------------------------------------------------------

    def wake_producer(self, producer: QueueProducer) -> None:
        wake = self._wakes.get(producer.queue)
        if wake is not None:
            wake.set()

    def wake_all(self) -> None:
        for producer in self.producers.values():
            producer.request_claim()

    def _on_due(self, queue: str, run_at: datetime | None) -> None:
        if not queue:
            self.wake_all()
        elif (producer := self.producers.get(queue)) is not None:
            if run_at is None:
                producer.request_claim()
            else:
                producer.note_due(run_at)

    def _on_cancel(self, job_id: int) -> None:
        self.request_job_cancel(job_id, "notification")

    # --- life cycle ----------------------------------------------------------------

    def request_stop(self) -> None:
        """First call: stop claiming and drain within the grace. Second: release now."""
        if self._stop_requested is None or self._hard_stop is None:
            return
        if self._stop_requested.is_set():
            self._hard_stop.set()
        self._stop_requested.set()

    async def run(self) -> None:
        """Run until `request_stop()`; returns after a clean shutdown."""
        loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        self._hard_stop = asyncio.Event()
        self._wakes = {queue: asyncio.Event() for queue in self.producers}
        claims_stop, services_stop = asyncio.Event(), asyncio.Event()
        await self._register()
        if self.scheduler is not None:
            await self._sync_schedules()
        wakeups = Wakeups(self.store, loop, self._on_due, self._on_cancel)
        wakeups.start()
        claimers = [
            asyncio.create_task(
                run_forever(
                    f"queue.{q}", p.run_once, p.interval, claims_stop, log, wake=self._wakes[q]
                )
            )
            for q, p in self.producers.items()
        ]
        services = [
            asyncio.create_task(
                run_forever(name, service.run_once, service.interval, services_stop, log, wake=wake)
            )
            for name, service, wake in (
                ("completer", self.completer, self.completer.wake),
                ("heartbeat", self.heartbeater, None),
                ("trust", self.trust_watch, None),
                ("rescuer", self.rescuer, None),
                ("unknown_tasks", self.unknown_tasks, None),
                *((("scheduler", self.scheduler, None),) if self.scheduler else ()),
                ("pruner", self.pruner, None),
            )
        ]
        event(
            log,
            "worker.started",
            worker=self.settings.worker_id,
            queues=",".join(f"{q}={n}" for q, n in self.settings.queues.items()),
            lease=self.settings.lease,
        )
        try:
            await self._stop_requested.wait()
            self.stopping = True
            claims_stop.set()
            for wake in self._wakes.values():
                wake.set()
            await asyncio.gather(*claimers, return_exceptions=True)
            await self._drain_and_release()
        finally:
            services_stop.set()
            await asyncio.gather(*services, return_exceptions=True)
            if self.scheduler is not None:
                await self.call(self.scheduler.stop)
            wakeups.stop()
            await self._set_state("stopped")
            self.call.close()
            self._heartbeat_call.close()
            self._handler_threads.shutdown(wait=False, cancel_futures=True)
        event(log, "worker.stopped", worker=self.settings.worker_id)

    async def _register(self) -> None:
        backoff = 0.2
        while True:
            try:
                registration = WorkerRegistration(
                    self.settings.worker_id,
                    socket.gethostname(),
                    os.getpid(),
                    self.settings.queues,
                    self.task_names,
                )
                await self.call(self.store.worker_register, registration)
                database_now = await self.call(self.store.now)
                self._database_offset = database_now - self.clock.wall()
                return
            except StoreUnavailableError as error:
                event(log, "worker.waiting_for_database", logging.WARNING, error=str(error))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _sync_schedules(self) -> None:
        report = await self.call(self.app.sync_schedules)
        for name in report.added:
            event(log, "schedule.added", schedule=name)
        for name in report.changed:
            event(log, "schedule.changed", schedule=name)
        for name in report.disabled:
            event(
                log,
                "schedule.disabled",
                logging.WARNING,
                schedule=name,
                reason="no longer defined in the code",
            )

    async def _drain_and_release(self) -> None:
        assert self._hard_stop is not None
        await self._set_state("stopping")
        # Jobs claimed ahead have not started: another worker may take them now.
        await self._release([r for r in self._unfinished() if r.handle is None])
        unfinished = self._unfinished()
        if unfinished:
            event(log, "worker.draining", jobs=len(unfinished), grace=self.settings.grace)
            handles = [r.straggler or r.handle for r in unfinished if r.handle is not None]
            waiter = asyncio.ensure_future(asyncio.wait(handles))
            await wait_for_any(self._hard_stop, _event_when_done(waiter), self.settings.grace)
            waiter.cancel()
        await self._release(self._unfinished())
        await self._flush_acknowledgements()

    def _unfinished(self) -> list[RunningJob]:
        return [r for r in self.running.values() if not r.finished and not r.lost]

    async def _release(self, unfinished: list[RunningJob]) -> None:
        if not unfinished:
            return
        reason = f"released by worker {self.settings.worker_id} at shutdown"
        try:
            await self.call(self.store.job_release, [r.lease for r in unfinished], reason)
        except StoreError as error:
            event(
                log,
                "worker.release_failed",
                logging.ERROR,
                error=str(error),
                jobs=len(unfinished),
                note="they will be rescued when their lease expires",
            )
        for running in unfinished:
            self.lease_lost(running, "released at shutdown", level=logging.INFO)

    async def _flush_acknowledgements(self) -> None:
        for attempt in range(5):
            try:
                await self.completer.flush()
                return
            except StoreError as error:
                event(log, "worker.flush_failed", logging.ERROR, error=str(error), attempt=attempt)
                await asyncio.sleep(0.5 * (attempt + 1))

    async def _set_state(self, state: str) -> None:
        try:
            await self.call(self.store.worker_set_state, self.settings.worker_id, state)
        except StoreError as error:
            event(log, "worker.state_not_recorded", logging.WARNING, state=state, error=str(error))


def _event_when_done(future: asyncio.Future[Any]) -> asyncio.Event:
    done = asyncio.Event()
    future.add_done_callback(lambda _: done.set())
    return done


def _completed_in_transaction(running: RunningJob) -> bool:
    return running.context is not None and running.context.completed_in_transaction
