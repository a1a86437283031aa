"""The worker's services in-process, on real stores, driven by run_once and a fake clock."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.records import ClaimRequest, Retention
from due.store import open_store
from due.worker.settings import WorkerSettings
from due.worker.startup import register
from due.worker.worker import Worker
from tests.helpers.database import cut_sessions, plain_transaction, rows
from tests.helpers.waiting import async_wait_until
from tests.helpers.write_lock import WriteLock


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), timeout=30))


def make_worker(app: due.App, **queues: int) -> Worker:
    return Worker(app, WorkerSettings.build(queues or {"default": 10}, lease="10s", grace="1s"))


async def settle() -> None:
    """Let the tasks that are ready run (handlers, callbacks)."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_each_queue_claims_only_up_to_its_own_free_slots(app: due.App) -> None:
    gate = asyncio.Event()

    @app.task(name="blocked")
    async def blocked() -> None:
        await gate.wait()

    @app.task(name="bulk", queue="bulk")
    async def bulk() -> None:
        await gate.wait()

    async def scenario() -> None:
        for _ in range(5):
            blocked.enqueue()
        for _ in range(3):
            bulk.enqueue()
        worker = make_worker(app, default=2, bulk=1)
        default, bulk_queue = worker.producers["default"], worker.producers["bulk"]
        assert await default.run_once() == 2
        assert await default.run_once() == 0  # no free slot
        assert await bulk_queue.run_once() == 1  # bulk's slots are its own
        gate.set()
        await settle()
        assert default.free_slots == 2
        assert await default.run_once() == 2

    run(scenario)


def test_acknowledgements_are_written_in_one_batch(app: due.App) -> None:
    @app.task(name="quick")
    async def quick(n: int) -> int:
        return n

    async def scenario() -> None:
        jobs = app.enqueue_many([quick.request(n) for n in range(50)])
        worker = make_worker(app, default=50)
        calls = []
        write = worker.completer.write

        async def counting(completions: Any) -> set[int]:
            calls.append(len(completions))
            return await write(completions)

        worker.completer.write = counting
        assert await worker.producers["default"].run_once() == 50
        await settle()
        assert await worker.completer.run_once() == 50
        assert calls == [50]
        assert {app.get(job.id).state for job in jobs} == {JobState.SUCCEEDED}
        assert worker.running == {}  # acknowledged jobs are no longer held

    run(scenario)


def test_a_lost_lease_cancels_the_async_handler_and_writes_nothing(
    app: due.App, clock: FakeClock
) -> None:
    cleaned_up = []

    @app.task(name="long")
    async def long() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned_up.append(True)

    async def scenario() -> None:
        job = long.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        clock.advance("11s")  # the lease expires; another worker takes the job over
        app.store.job_rescue()
        (taken,) = app.store.job_claim(ClaimRequest("default", 1, "thief", 10))
        beat = await worker.heartbeater.run_once()
        assert beat.lost == 1
        await settle()
        assert cleaned_up == [True]
        assert worker.running == {} and worker.completer.pending == []
        assert worker.producers["default"].free_slots == 10
        current = app.get(job.id)
        assert current.state == JobState.RUNNING and current.worker == "thief"
        assert taken.lease_token > 1

    run(scenario)


def test_a_lease_that_cannot_be_renewed_in_time_is_given_up(app: due.App, clock: FakeClock) -> None:
    @app.task(name="long")
    async def long() -> None:
        await asyncio.sleep(3600)

    async def scenario() -> None:
        long.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        # The database becomes unreachable: a real connection refused, not a stub.
        healthy = worker.statements.store
        worker.statements.store = open_store(
            "postgresql://127.0.0.1:1/none", clock, connect_timeout=0.5
        )
        try:
            clock.advance("7s")  # within the trust window (10s * 0.8)
            beat = await worker.heartbeater.run_once()
            assert beat.failed and beat.untrusted == 0 and len(worker.running) == 1
            clock.advance("2s")  # past it, still no renewal
            beat = await worker.heartbeater.run_once()
            assert beat.failed and beat.untrusted == 1
        finally:
            worker.statements.store.close()
            worker.statements.store = healthy
        await settle()
        assert worker.running == {} and worker.completer.pending == []

    run(scenario)


def test_heartbeats_renew_every_lease_the_worker_holds(app: due.App, clock: FakeClock) -> None:
    @app.task(name="long", lease="4s")
    async def long() -> None:
        await asyncio.sleep(3600)

    async def scenario() -> None:
        jobs = [long.enqueue() for _ in range(3)]
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        assert worker.heartbeater.interval() == pytest.approx(4 / 3)
        clock.advance("3s")
        beat = await worker.heartbeater.run_once()
        assert beat.renewed == 3
        clock.advance("3s")  # past the first lease, within the renewed one
        assert app.store.job_rescue().count == 0
        assert {app.get(job.id).state for job in jobs} == {JobState.RUNNING}
        for running in worker.held():
            assert running.handle is not None
            running.handle.cancel()
        await settle()

    run(scenario)


def test_a_worker_whose_row_was_pruned_registers_again_at_its_next_heartbeat(
    app: due.App, clock: FakeClock
) -> None:
    """A worker paused past the retention is marked gone and pruned; when it
    wakes, its next report finds no row and registers it again (otherwise the
    unknown-task reaper of other workers would count it as absent for good)."""

    async def scenario() -> None:
        worker = make_worker(app)
        await register(worker.statements, worker.clock_watch)
        clock.advance("1m")
        assert app.store.worker_mark_gone(30) == [worker.settings.worker_id]  # paused
        clock.advance("31d")
        app.store.job_prune(Retention())
        assert app.store.worker_list() == []
        await worker.heartbeater.run_once()
        (again,) = app.store.worker_list()
        assert again.id == worker.settings.worker_id and again.state == "running"
        assert again.queues == {"default": 10}

    run(scenario)


def test_unknown_tasks_wait_then_fail_after_the_grace(
    app: due.App, backend_url: str, clock: FakeClock
) -> None:
    newer = due.App(backend_url, clock=clock)

    @newer.task(name="added_later")
    def added_later() -> None: ...

    @app.task(name="known")
    def known() -> None: ...

    job = added_later.enqueue()
    newer.close()

    async def scenario() -> None:
        worker = Worker(app, WorkerSettings.build({"default": 5}, unknown_task_grace="1h"))
        assert await worker.producers["default"].run_once() == 0
        clock.advance("59m")
        assert await worker.unknown_tasks.run_once() == []
        assert app.get(job.id).attempt == 0  # untouched: no attempt burnt
        clock.advance("2m")
        assert await worker.unknown_tasks.run_once() == [job.id]
        assert "unknown task added_later" in (app.get(job.id).last_error or "")

    run(scenario)


def test_shutdown_drains_releases_and_writes_every_ack(app: due.App) -> None:
    started = asyncio.Event()

    @app.task(name="quick")
    async def quick() -> str:
        return "done"

    @app.task(name="endless")
    async def endless() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def scenario() -> None:
        quick_jobs = [quick.enqueue() for _ in range(5)]
        stuck = endless.enqueue()
        worker = make_worker(app)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 10)
        worker.request_stop()
        await asyncio.wait_for(running, 10)
        assert {app.get(job.id).state for job in quick_jobs} == {JobState.SUCCEEDED}
        released = app.get(stuck.id)
        assert released.state == JobState.QUEUED and released.attempt == 0
        assert released.errors[-1].kind == "released"
        (info,) = app.store.worker_list()
        assert info.state == "stopped" and info.id == worker.settings.worker_id

    run(scenario)


def test_a_sync_handler_past_its_timeout_keeps_its_slot_until_it_returns(app: due.App) -> None:
    release = threading.Event()

    @app.task(name="stuck", timeout=0.05, retry=due.Retry(max_attempts=2, backoff=60))
    def stuck() -> str:
        release.wait(10)
        return "too late"

    async def scenario() -> None:
        job = stuck.enqueue()
        worker = make_worker(app, default=1)
        producer = worker.producers["default"]
        assert await producer.run_once() == 1
        # The timeout passes; the thread does not stop.
        await async_wait_until(lambda: producer.jobs.held[job.id].straggler, what="timeout")
        await worker.completer.run_once()
        assert app.get(job.id).state == JobState.RUNNING  # its lease kept: no retry yet
        assert producer.free_slots == 0 and worker.executor.threads_busy == 1
        release.set()
        await async_wait_until(lambda: producer.jobs.outcomes, what="the thread's end")
        await worker.completer.run_once()
        assert producer.free_slots == 1 and worker.executor.threads_busy == 0
        timed_out = app.get(job.id)
        assert timed_out.state == JobState.QUEUED and timed_out.errors[0].kind == "timeout"
        assert timed_out.result is None  # the late result is discarded

    run(scenario)


def test_lookahead_follows_job_duration_and_is_released_first_at_shutdown(app: due.App) -> None:
    gate = asyncio.Event()
    started: list[int] = []

    @app.task(name="blocked")
    async def blocked(ctx: due.Context) -> None:
        started.append(ctx.job_id)
        await gate.wait()

    async def scenario() -> None:
        jobs = [blocked.enqueue() for _ in range(10)]
        worker = Worker(app, WorkerSettings.build({"default": 4}, grace="30s"))
        producer = worker.producers["default"]
        producer.claim_seconds = 0.005
        producer.job_seconds = 3600.0
        assert producer.lookahead == 0  # long jobs: never hold one back from other workers
        producer.job_seconds = 0.005
        assert producer.lookahead == 4  # never more than its slots
        producer.job_seconds = 0.02
        assert producer.lookahead == 2  # short jobs: twice as many as finish during one claim
        running = asyncio.create_task(worker.run())
        for _ in range(200):
            if len(started) == 4 and len(producer.ready) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(started) == 4 and len(producer.ready) == 2 and len(worker.held()) == 6
        ahead = [r.job.id for r in producer.ready]
        worker.request_stop()
        for _ in range(200):
            if all(app.get(job_id).state == JobState.QUEUED for job_id in ahead):
                break
            await asyncio.sleep(0.01)
        # Released while the running ones still run: no waiting for the grace.
        assert {app.get(job_id).state for job_id in ahead} == {JobState.QUEUED}
        assert {app.get(job_id).state for job_id in started} == {JobState.RUNNING}
        gate.set()
        await asyncio.wait_for(running, 10)
        assert {app.get(job_id).state for job_id in started} == {JobState.SUCCEEDED}
        assert len({job.id for job in jobs} - set(started) - set(ahead)) == 4  # never claimed

    run(scenario)


def test_a_second_stop_request_releases_at_once(app: due.App) -> None:
    started = asyncio.Event()

    @app.task(name="endless")
    async def endless() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def scenario() -> None:
        job = endless.enqueue()
        worker = Worker(app, WorkerSettings.build({"default": 1}, grace="1h"))
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 10)
        worker.request_stop()
        await asyncio.sleep(0.2)
        assert not running.done()  # draining, within its hour of grace
        worker.request_stop()
        await asyncio.wait_for(running, 5)
        released = app.get(job.id)
        assert released.state == JobState.QUEUED and released.errors[-1].kind == "released"

    run(scenario)


def test_two_stop_requests_at_once_skip_the_grace(app: due.App) -> None:
    """A quick double Ctrl-C, or SIGTERM then SIGINT from a supervisor: the
    second request lands before the drain begins, and must skip it too."""
    started = asyncio.Event()

    @app.task(name="endless")
    async def endless() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def scenario() -> None:
        job = endless.enqueue()
        worker = Worker(app, WorkerSettings.build({"default": 1}, grace="1h"))
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 10)
        worker.request_stop()
        worker.request_stop()
        await asyncio.wait_for(running, 5)
        released = app.get(job.id)
        assert released.state == JobState.QUEUED and released.errors[-1].kind == "released"

    run(scenario)


def test_claims_stop_while_too_many_ended_jobs_await_their_acknowledgement(
    postgres_url: str, clock: FakeClock
) -> None:
    """Back-pressure (PostgreSQL, where acknowledgements are written apart from
    claims): ended jobs awaiting their write may number as many as the slots;
    beyond that they hold slots, so claims cannot outrun acknowledgements."""
    app = due.App(postgres_url, clock=clock)
    app.migrate()

    @app.task(name="quick")
    async def quick(n: int) -> int:
        return n

    async def scenario() -> None:
        app.enqueue_many([quick.request(n) for n in range(100)])
        worker = make_worker(app, default=5)
        producer = worker.producers["default"]
        for _ in range(30):  # claim and run, never writing an acknowledgement
            await producer.run_once()
            await settle()
        assert (producer.jobs.active, producer.jobs.unwritten, producer.free_slots) == (0, 10, 0)
        assert await producer.run_once() == 0
        # What writing some of them would free (SQLite sizes its claims, which carry
        # the acknowledgements, by it): only those beyond the allowance held slots.
        assert [producer.jobs.slots_freed_by_writing(n) for n in (3, 5, 10)] == [3, 5, 5]
        leased = app.jobs(state=JobState.RUNNING, limit=1000)
        assert len(leased) == 10 + len(producer.ready)  # the ended ones and those claimed ahead
        assert await worker.completer.run_once() == 10
        assert producer.free_slots == 5
        assert len(app.jobs(state=JobState.SUCCEEDED, limit=1000)) == 10

    try:
        run(scenario)
    finally:
        app.close()


def quick_app(url: str) -> tuple[due.App, due.Task[Any, Any]]:
    """A migrated app (real clock) with a task that returns its argument."""
    app = due.App(url)
    app.migrate()

    @app.task(name="quick")
    async def quick(n: int) -> int:
        return n

    return app, quick


def test_on_postgres_claims_and_acknowledgements_take_no_database_thread(
    postgres_url: str,
) -> None:
    """They run on the event loop's own connections (the loop lane), never on
    the worker's database threads."""
    app, quick = quick_app(postgres_url)

    async def scenario() -> None:
        worker = make_worker(app)
        called: list[str] = []
        for name in ("job_claim", "job_complete", "job_claim_on_loop", "job_complete_on_loop"):
            real = getattr(app.store, name)
            setattr(app.store, name, _recorded(name, real, called))  # a spy, still real
        running = asyncio.create_task(worker.run())
        try:
            jobs = app.enqueue_many([quick.request(n) for n in range(20)])
            await async_wait_until(
                lambda: all(app.get(job.id).state == JobState.SUCCEEDED for job in jobs)
            )
            assert sorted(app.get(job.id).result for job in jobs) == list(range(20))
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, 10)
            app.close()
        assert {"job_claim_on_loop", "job_complete_on_loop"} <= set(called)
        assert "job_claim" not in called and "job_complete" not in called

    run(scenario)


def _recorded(name: str, call: Callable[..., Any], called: list[str]) -> Callable[..., Any]:
    if asyncio.iscoroutinefunction(call):

        async def recorded_async(*args: Any) -> Any:
            called.append(name)
            return await call(*args)

        return recorded_async

    def recorded(*args: Any) -> Any:
        called.append(name)
        return call(*args)

    return recorded


def test_when_the_loop_lane_fails_the_thread_path_writes_instead(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends the worker's sessions while an acknowledgement waits on
    a row lock (a restart or a failover mid-statement): the end is written
    through the threads instead, once, and counted once."""
    name = f"due-lane-{uuid.uuid4().hex[:8]}"
    app = due.App(f"{postgres_url}&application_name={name}")
    app.migrate()
    gate = asyncio.Event()

    @app.task(name="gated")
    async def gated(n: int) -> int:
        await gate.wait()
        return n

    async def scenario() -> None:
        worker = make_worker(app)
        running = asyncio.create_task(worker.run())
        web = due.App(postgres_url)  # another process's app: not cut
        web.task(name="gated")(gated.fn)
        try:
            (job,) = web.enqueue_many([gated.request(7)])
            await async_wait_until(lambda: web.get(job.id).state == JobState.RUNNING)
            with psycopg.connect(postgres_url) as admin:  # a transaction holding its row
                admin.execute("SELECT 1 FROM due_jobs WHERE id = %s FOR UPDATE", (job.id,))
                with caplog.at_level("DEBUG", logger="due.worker"):
                    gate.set()
                    await async_wait_until(
                        lambda: waiting_on_a_lock(postgres_url, name),
                        what="the acknowledgement to wait on the row lock",
                    )
                    assert cut_sessions(postgres_url, name) > 0
                    admin.commit()
                    await async_wait_until(
                        lambda: web.get(job.id).state == JobState.SUCCEEDED,
                        timeout=20,
                        what="the end written through the threads",
                    )
            calls = [
                getattr(r, "fields", {}).get("call")
                for r in caplog.records
                if getattr(r, "event", "") == "worker.loop_lane_failed"
            ]
            assert "acknowledgement" in calls
            assert web.get(job.id).result == 7
            (figures,) = [f for f in web.store.stats_figures() if f.task == "gated"]
            assert figures.window("total").counts["succeeded"] == 1  # once
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, 10)
            web.close()
            app.close()

    run(scenario)


def test_a_failing_loop_lane_is_said_at_info_once_a_minute(
    app: due.App, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Every claim may fall back while the database is away: the log says so
    once a minute, not once per claim."""
    worker = make_worker(app)
    error = due.StoreUnavailableError("the database is away")
    with caplog.at_level("DEBUG", logger="due.worker"):
        for _ in range(3):
            worker.statements._lane_failed("claim", error)
            clock.advance("20s")
        worker.statements._lane_failed("acknowledgement", error)  # 60 s after the first
    said = [
        (r.levelname, getattr(r, "fields", {}).get("call"))
        for r in caplog.records
        if getattr(r, "event", "") == "worker.loop_lane_failed"
    ]
    assert said == [
        ("INFO", "claim"),
        ("DEBUG", "claim"),
        ("DEBUG", "claim"),
        ("INFO", "acknowledgement"),
    ]


def waiting_on_a_lock(url: str, application_name: str) -> bool:
    """Whether that application's acknowledgement waits on a row lock."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND wait_event_type = 'Lock' "
            # the acknowledgement (within the 1 KB of its text the server shows)
            "AND query LIKE '%%SET state = CASE WHEN j.cancel_requested AND c.state%%'",
            (application_name,),
        ).fetchone()
    return bool(row and row[0])


def test_a_tasks_shorter_lease_is_renewed_in_time_on_an_idle_worker(
    backend_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 35, hole 9: an idle worker's heartbeat slept a third of its default
    lease (3.3 s of 10 s), and nothing woke it when a job with a task's own
    shorter lease was claimed: that job's trust deadline (0.8 of its lease)
    passed before its first renewal, and it ran again elsewhere. Real time:
    each job outlives its own lease."""
    app = due.App(backend_url)
    app.migrate()

    @app.task(name="short", lease="2s")  # trusted for 1.6 s, renewed every 0.67 s
    async def short(n: int) -> int:
        await asyncio.sleep(2.2)
        return n

    async def scenario() -> None:
        worker = make_worker(app)  # its own lease: 10 s, beats every 3.3 s when idle
        running = asyncio.create_task(worker.run())
        try:
            await asyncio.sleep(0.3)  # the heartbeat settles into its idle sleep
            job = short.enqueue(1)
            await async_wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, timeout=10)
            assert app.get(job.id).attempt == 1
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, 10)
            app.close()

    with caplog.at_level("INFO", logger="due.worker"):
        run(scenario)
    lost = [r for r in caplog.records if getattr(r, "event", "") == "job.lease_lost"]
    assert lost == []


def test_a_failed_touch_keeps_the_renewal_it_follows(
    app: due.App, clock: FakeClock, backend_url: str
) -> None:
    """The heartbeat round renews leases, then touches the worker's registration:
    when the touch failed after the renewal succeeded, the renewal's reply was
    thrown away (trust not extended, a cancel request dropped for that round)."""

    @app.task(name="long")
    async def long() -> None:
        await asyncio.sleep(3600)

    async def scenario() -> None:
        job = long.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        (running,) = worker.held()
        trusted = running.trusted_until
        app.cancel(job.id)
        with plain_transaction(backend_url) as conn:  # the registry is gone: touches fail
            conn.execute("ALTER TABLE due_workers RENAME TO due_workers_away")
        clock.advance("3s")
        try:
            beat = await worker.heartbeater.run_once()
        finally:
            with plain_transaction(backend_url) as conn:
                conn.execute("ALTER TABLE due_workers_away RENAME TO due_workers")
        assert beat.renewed == 1 and not beat.failed
        assert running.trusted_until > trusted and running.cancel_requested
        running.handle.cancel()
        await settle()

    run(scenario)


def test_a_last_attempt_begins_only_once_its_start_is_recorded(
    app: due.App, clock: FakeClock, backend_url: str
) -> None:
    """Only a start that ran is an attempt, and a job on its last attempt must
    not run uncounted: its start is recorded before its handler begins. With
    the database out of reach (found in review: a worker cut off after the
    start left the attempt uncounted, and a `max_attempts=1` job ran again),
    the handler does not begin, and the job goes back uncounted."""
    ran: list[str] = []

    @app.task(name="once", retry=due.Retry(max_attempts=1))
    async def once() -> None:
        said = rows(backend_url, "SELECT attempt_status FROM due_jobs")
        ran.append(said[0][0])

    async def scenario() -> None:
        job = once.enqueue()
        worker = make_worker(app)
        healthy = worker.statements.store
        producer = worker.producers["default"]
        (claimed,) = await worker.statements.claim(producer.jobs, 1)
        worker.statements.store = open_store(
            "postgresql://127.0.0.1:1/none", clock, connect_timeout=0.5
        )
        producer._place(worker.runner.hold(claimed, producer.jobs, clock.monotonic()))
        try:
            for _ in range(100):  # the failed record, then the job given up
                await asyncio.sleep(0.01)
                if not worker.running:
                    break
        finally:
            worker.statements.store.close()
            worker.statements.store = healthy
        assert ran == [] and worker.running == {}
        clock.advance("11s")
        assert app.store.job_rescue().requeued == (job.id,)
        assert app.get(job.id).attempt == 0
        await worker.producers["default"].run_once()  # the database is back
        await async_wait_until(lambda: ran)
        await worker.completer.run_once()
        assert ran == ["started"] and app.get(job.id).attempt == 1
        assert app.get(job.id).state == JobState.SUCCEEDED

    run(scenario)


def test_a_claimed_job_begins_before_the_next_due_time_is_asked(app: due.App) -> None:
    """After a claim that leaves slots free the producer asks the store for the
    next due time, on a thread that wakes and takes the GIL: the jobs just
    claimed take their first step before it, so their start does not wait on it."""
    began: list[str] = []
    asked_when: list[list[str]] = []

    @app.task(name="quick")
    async def quick() -> None:
        began.append("quick")

    async def scenario() -> None:
        quick.enqueue()
        worker = make_worker(app)
        producer = worker.producers["default"]
        next_due = producer._next_due_of

        async def noting(queue: str) -> Any:
            asked_when.append(list(began))  # what had begun when it was asked
            return await next_due(queue)

        producer._next_due_of = noting
        assert await producer.run_once() == 1
        await settle()
        await worker.completer.run_once()

    run(scenario)
    assert asked_when == [["quick"]]


def test_a_last_attempt_recorded_too_late_to_begin_goes_back_uncounted(
    app: due.App, clock: FakeClock, backend: str
) -> None:
    """The record of a last attempt's start committed, but its reply came back
    after the lease was no longer trusted (a server shutting down held it; the
    chaos run found one on PostgreSQL): the handler does not begin, and the
    worker hands the job back at once, uncounted, rather than leave the rescue
    to count an attempt that never ran (invariant 12)."""
    ran: list[int] = []

    @app.task(name="once", retry=due.Retry(max_attempts=1))
    async def once() -> None:
        ran.append(1)

    async def scenario() -> None:
        job = once.enqueue()
        worker = make_worker(app)
        producer = worker.producers["default"]
        (claimed,) = await worker.statements.claim(producer.jobs, 1)
        lock = WriteLock(backend, app.url)
        lock.take()  # the record of its start waits behind it
        try:
            producer._place(worker.runner.hold(claimed, producer.jobs, clock.monotonic()))
            await settle()  # the record is sent, and waits
            clock.advance("9s")  # past the 10 s lease's trusted 8 s
            await asyncio.sleep(0.2)
        finally:
            lock.release()
            lock.close()
        await async_wait_until(lambda: not worker.running, what="the job given up")
        handed_back = await async_wait_until(
            lambda: (found := app.get(job.id)).state == JobState.QUEUED and found,
            what="the job handed back",
        )
        assert ran == [] and handed_back.attempt == 0
        assert handed_back.errors[-1].kind == "released"
        await producer.run_once()
        await async_wait_until(lambda: ran)
        await async_wait_until(lambda: worker.completer.pending)
        await worker.completer.run_once()
        done = app.get(job.id)
        assert done.state == JobState.SUCCEEDED and done.attempt == 1

    run(scenario)
