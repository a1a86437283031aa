"""The worker: an asyncio process that claims, runs and acknowledges jobs.

    producer (one per queue) ──claim──► runner ──► executor ──► ledger ──► completer ──► store
        ▲   owns its queue's ledger (slots, ready jobs, unwritten outcomes)
        └── wake-ups, slots freed, due times
    heartbeater, start reports, trust watch (leases) · rescuer, unknown-task reaper, pruner,
    vacuum · scheduler · shutdown (drain, then release)
    clock watch (the database's clock, measured again: every wait for a due time uses it)

This module assembles them, each given only what it uses, and runs the
process's life cycle; none of them knows the worker.

Guarantees and what happens when things fail:

- A job runs only while this worker holds its lease. Heartbeats renew every
  lease in one statement; a lease the store no longer holds, or one that could
  not be renewed before its trust deadline, is lost: an async handler is
  cancelled at its next `await`, a sync handler's result is discarded, and
  nothing more is written for the job (writes are fenced by the token anyway).
- Each queue has its own slots: a flood on one queue never takes another's.
- On SIGTERM/SIGINT the worker stops claiming, lets running jobs finish for
  the grace period, then tells the rest to stop and releases them (attempt not
  counted): due again at once, or, for a job whose handler thread still runs,
  once the lease it held expires (shutdown.py). A second signal skips the
  waits. Pending acknowledgements are always written before exit.
- Only a start that ran is an attempt: a claim marks its attempt 'claimed',
  and the start reports (heartbeat.py) say 'started' within a quarter second
  of the handler beginning; a rescue counts the attempt only then.
- A database outage is ridden out: every loop retries with backoff; leases
  that cannot be renewed in time are given up, and rescued elsewhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from due.app import App
from due.clock import Clock, DatabaseClock
from due.core.records import UnknownTaskSweep
from due.logs import event
from due.maintenance.limit_sweep import LimitSweep
from due.maintenance.pruner import Pruner
from due.maintenance.rescuer import Rescuer
from due.maintenance.unknown_tasks import UnknownTaskReaper
from due.maintenance.vacuum import Vacuum
from due.redaction import redact_url
from due.scheduler.leader import DatabaseLeases, Leadership, RedisLeases
from due.scheduler.service import Scheduler
from due.service import Service, run_forever
from due.worker.calls import StoreCalls
from due.worker.clock_watch import ClockWatch
from due.worker.completer import Completer
from due.worker.event_loop import loop_name
from due.worker.executor import Executor
from due.worker.hand_backs import HandBacks
from due.worker.health import HealthServer, Probes
from due.worker.heartbeat import Heartbeater, StartReports, TrustWatch
from due.worker.ledger import RunningJobs
from due.worker.producer import QueueProducer
from due.worker.recycling import Recycler
from due.worker.runner import Runner
from due.worker.running import RunningJob
from due.worker.settings import WorkerSettings
from due.worker.shutdown import Shutdown
from due.worker.startup import register, sync_schedules
from due.worker.statements import Statements
from due.worker.tally import Tally
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
        # Only a worker that knows limits looks at limited jobs: it runs the
        # code that counts them (one without is never slowed by them).
        self.limited = len(app.limits) > 0 or any(t.config.limits for t in app.tasks)
        self.call = StoreCalls(settings.db_threads, "due-db")
        self._heartbeat_call = StoreCalls(1, "due-heartbeat")
        self._handler_threads = concurrent.futures.ThreadPoolExecutor(
            settings.total_concurrency, thread_name_prefix="due-task"
        )
        self.database_clock = DatabaseClock(self.clock)
        self.clock_watch = ClockWatch(
            database_clock=self.database_clock,
            clock=self.clock,
            read=self.store.now,
            call=self.call,
            interval=settings.clock_interval,
            on_step=self.wake_all,
        )
        self.statements = Statements(
            store=self.store,
            call=self.call,
            heartbeat_call=self._heartbeat_call,
            clock=self.clock,
            settings=settings,
            task_names=self.task_names,
            task_leases=self.task_leases,
            limited=self.limited,
            wake_all=self.wake_all,
        )
        self.executor = Executor(
            app.tasks,
            self.clock,
            threads=self._handler_threads,
            app=app,
            worker=settings.worker_id,
        )
        self.hand_backs = HandBacks(store=self.store, call=self.call)
        self.runner = Runner(
            app=app,
            executor=self.executor,
            clock=self.clock,
            default_lease=settings.lease,
            find=self._find,
            cancel_grace=self._cancel_grace,
            on_held=self._held_one,
            confirm_start=self._confirm_start,
            database_now=self.database_now,
            too_late=self.hand_backs.too_late,
            limited_now=self.hand_backs.limited_now,
            unbegun=self.hand_backs.unbegun,
        )
        self.producers = {
            queue: QueueProducer(
                queue=queue,
                concurrency=concurrency,
                claim=self.statements.claim,
                next_due=self.statements.next_due,
                hold=self.runner.hold,
                launch=self._launch,
                clock=self.clock,
                database_now=self.database_now,
                poll_interval=settings.poll_interval,
                on_outcome=self._outcome_recorded,
            )
            for queue, concurrency in settings.queues.items()
        }
        ledgers = [producer.jobs for producer in self.producers.values()]
        self.tally = Tally()
        self.completer = Completer(
            ledgers=ledgers,
            write=self.statements.write_outcomes,
            flush_interval=settings.flush_interval,
            tally=self.tally,
        )
        self.statements.completer = self.completer  # (built after the producers)
        self.heartbeater = Heartbeater(
            held=self.held,
            renew=self.statements.renew,
            touch=self.statements.touch,
            clock=self.clock,
            lease=settings.lease,
            on_lost=self.runner.lease_lost,
            on_cancel=self.runner.request_cancel,
        )
        self.start_reports = StartReports(self.heartbeater)
        self.probes = Probes(
            beats=self.heartbeater,
            clock=self.clock,
            lease=settings.lease,
            stale_after=settings.gone_after,
        )
        self.recycler = Recycler(
            max_jobs=settings.max_jobs, max_memory=settings.max_memory, recycle=self._recycle
        )
        self.trust_watch = TrustWatch(
            held=self.held, clock=self.clock, on_lost=self.runner.lease_lost
        )
        self.rescuer = Rescuer(
            store=self.store,
            call=self.call,
            interval=settings.rescue_interval,
            max_lost_leases=settings.max_lost_leases,
            gone_after=settings.gone_after,
            on_requeued=self.wake_all,
        )
        sweep = UnknownTaskSweep(
            list(settings.queues),
            self.task_names,
            settings.unknown_task_grace,
            settings.gone_after,
            task_limits={t.name: [use.name for use in t.config.limits] for t in app.tasks},
            worker=settings.worker_id,
        )
        self.unknown_tasks = UnknownTaskReaper(store=self.store, call=self.call, sweep=sweep)
        self.limit_sweep = LimitSweep(store=self.store, call=self.call, on_released=self.wake_all)
        self.scheduler = self._scheduler() if settings.scheduler else None
        self.pruner = Pruner(
            store=self.store,
            call=self.call,
            leading=lambda: self.scheduler is not None and self.scheduler.leadership.is_leader,
            retention=settings.retention,
        )
        self.vacuum = Vacuum(
            store=self.store,
            call=self.call,
            leading=lambda: self.scheduler is not None and self.scheduler.leadership.is_leader,
            clock=self.clock,
            table_work=self.pruner.table_work,  # never during a prune
        )
        self._stop_requested: asyncio.Event | None = None
        self._hard_stop: asyncio.Event | None = None
        self.exit_within: Callable[[float], None] = lambda seconds: None
        """Called at shutdown with how soon the process must have exited: a job
        was handed back while its handler thread still ran (the `due worker`
        process sets it to force its exit; in-process, the caller's concern)."""

    def _scheduler(self) -> Scheduler:
        url = self.settings.leader_url
        backend = RedisLeases(url) if url else DatabaseLeases(self.store)
        leadership = Leadership(
            backend, self.settings.worker_id, self.clock, ttl=self.settings.leader_ttl
        )
        return Scheduler(
            store=self.store, call=self.call, leadership=leadership, database_now=self.database_now
        )

    # --- between the parts --------------------------------------------------

    def _held_one(self, running: RunningJob) -> None:
        self.heartbeater.note_held(running)  # (built after the runner)

    async def _confirm_start(self, running: RunningJob) -> bool:
        return await self.heartbeater.confirm_start(running)

    def _outcome_recorded(self) -> None:
        self.completer.wake.set()

    def _cancel_grace(self) -> float:
        """How long a cancelled async handler with a context has to stop on its own."""
        return self.heartbeater.interval()

    def database_now(self) -> datetime:
        """The database's clock, estimated on the monotonic clock (clock_watch.py)."""
        return self.database_clock.now()

    # --- jobs ----------------------------------------------------------------

    def held(self) -> list[RunningJob]:
        """Jobs whose lease this worker holds (running, or awaiting their ack)."""
        return [r for producer in self.producers.values() for r in producer.jobs.held.values()]

    @property
    def running(self) -> dict[int, RunningJob]:
        return {running.job.id: running for running in self.held()}

    def _find(self, job_id: int) -> RunningJob | None:
        for producer in self.producers.values():
            if (running := producer.jobs.held.get(job_id)) is not None:
                return running
        return None

    # --- wake-ups --------------------------------------------------------------

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
        self.runner.request_cancel(job_id, "notification")

    # --- life cycle ----------------------------------------------------------------

    def _launch(self, running: RunningJob, jobs: RunningJobs) -> None:
        self.runner.launch(running, jobs)
        self.recycler.job_started()

    def _recycle(self, reason: str) -> None:
        """Past a limit (recycling.py): no claim and no start from now on, then
        the shutdown, as for SIGTERM."""
        for producer in self.producers.values():
            producer.stop()
        self.request_stop()

    def request_stop(self) -> None:
        """First call: stop claiming and drain within the grace. Second: release now."""
        if self._stop_requested is None or self._hard_stop is None:
            return
        if self._stop_requested.is_set():
            self._hard_stop.set()
        self._stop_requested.set()
        self.probes.phase = "draining"

    async def run(self) -> None:
        """Run until `request_stop()`; returns after a clean shutdown."""
        self._stop_requested = asyncio.Event()
        self._hard_stop = asyncio.Event()
        lane = self.store.loop_lane(len(self.producers) + 1)  # the claimers, the completer
        health = await self._serve_health()
        try:
            if lane is not None:
                await lane.open()
                self.statements.lane = lane
            await self._run()
        finally:
            self.statements.lane = None  # a straggling call takes a thread
            if lane is not None:
                await lane.close()
            if health is not None:
                await health.stop()
        summary: dict[str, Any] = {"worker": self.settings.worker_id, **self.tally.summary()}
        if self.recycler.reason:
            summary["recycled"] = self.recycler.reason
        event(log, "worker.stopped", **summary)

    async def _serve_health(self) -> HealthServer | None:
        if self.settings.health_port is None:
            return None
        server = HealthServer(self.probes, self.settings.health_port)
        await server.start()  # a port in use: the worker does not start, and says why
        event(log, "worker.health_serving", port=server.port, paths="/livez,/readyz")
        return server

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._stop_requested is not None
        claims_stop, services_stop = asyncio.Event(), asyncio.Event()
        await register(self.statements, self.clock_watch)
        if self.limited:  # the code's numbers, for every worker (an operator's stay)
            await self.call(self.app.sync_limits)
        if self.scheduler is not None:
            await sync_schedules(self.app, self.call)
        wakeups = Wakeups(self.store, loop, self._on_due, self._on_cancel)
        wakeups.start()
        claimers = [
            asyncio.create_task(
                run_forever(f"queue.{q}", p.run_once, p.interval, claims_stop, log, wake=p.wake)
            )
            for q, p in self.producers.items()
        ]
        services = [
            asyncio.create_task(
                run_forever(name, service.run_once, service.interval, services_stop, log, wake=wake)
            )
            for name, service, wake in self.services()
        ]
        event(
            log,
            "worker.started",
            worker=self.settings.worker_id,
            queues=",".join(f"{q}={n}" for q, n in self.settings.queues.items()),
            concurrency=sum(self.settings.queues.values()),
            database=redact_url(self.app.url),
            lease=self.settings.lease,
            loop=loop_name(loop),
        )
        if not self._stop_requested.is_set():
            self.probes.phase = "running"
        try:
            await self._stop_requested.wait()
            claims_stop.set()
            for producer in self.producers.values():
                producer.stop()
            await asyncio.gather(*claimers, return_exceptions=True)
            await self._shutdown().drain_and_release()
        finally:
            claims_stop.set()  # already, unless the wait above was cut short
            await asyncio.gather(*claimers, return_exceptions=True)
            services_stop.set()
            await asyncio.gather(*services, return_exceptions=True)
            if self.scheduler is not None:
                await self.call(self.scheduler.stop)
            wakeups.stop()
            # A recycling is counted with the stop (the metrics read it).
            await self.statements.set_state("stopped", recycled=self.recycler.reason)
            self.call.close()
            self._heartbeat_call.close()
            self._handler_threads.shutdown(wait=False, cancel_futures=True)

    def _shutdown(self) -> Shutdown:
        assert self._hard_stop is not None
        return Shutdown(
            store=self.store,
            call=self.call,
            runner=self.runner,
            completer=self.completer,
            unfinished=self._unfinished,
            set_state=self.statements.set_state,
            worker_id=self.settings.worker_id,
            grace=self.settings.grace,
            hard_stop=self._hard_stop,
            clock=self.clock,
            exit_within=self.exit_within,
            on_released=self._count_released,
        )

    def services(self) -> list[tuple[str, Service, asyncio.Event | None]]:
        """The background loops beside the producers: name, service, wake-up event.
        Each one's `interval()` has a floor of its own (and run_forever one for all)."""
        return [
            ("completer", self.completer, self.completer.wake),
            ("heartbeat", self.heartbeater, self.heartbeater.wake),
            ("starts", self.start_reports, None),
            ("trust", self.trust_watch, None),
            ("rescuer", self.rescuer, None),
            ("unknown_tasks", self.unknown_tasks, None),
            *((("limit_sweep", self.limit_sweep, None),) if self.limited else ()),
            *((("scheduler", self.scheduler, None),) if self.scheduler else ()),
            ("pruner", self.pruner, None),
            ("vacuum", self.vacuum, None),
            ("clock", self.clock_watch, None),
            *((("recycling", self.recycler, None),) if self.settings.max_memory else ()),
        ]

    def _count_released(self, jobs: int) -> None:
        self.tally.released += jobs

    def _unfinished(self) -> list[RunningJob]:
        return [r for producer in self.producers.values() for r in producer.jobs.unfinished()]
