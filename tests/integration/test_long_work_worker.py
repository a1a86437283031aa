"""Long work in the worker, in-process on real stores: cancellation delivered as the
heartbeat's reply, progress carried on heartbeats, parents that wait without a slot."""

from __future__ import annotations

import asyncio
import threading
import time

import due
from due import JobState
from due.clock import FakeClock
from tests.helpers.waiting import async_wait_until
from tests.integration.test_worker import make_worker, run, settle


def test_cancel_reaches_an_async_handler_at_its_next_safe_point(app: due.App) -> None:
    steps: list[int] = []
    cleaned_up = threading.Event()

    @app.task(name="crawl")
    async def crawl(ctx: due.Context) -> None:
        try:
            for step in range(100_000):
                steps.append(step)
                ctx.progress(step, 100_000)  # a safe point
                await asyncio.sleep(0.001)
        finally:
            cleaned_up.set()

    async def scenario() -> None:
        job = crawl.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await async_wait_until(lambda: len(steps) > 3)
        assert app.cancel(job.id).state == JobState.RUNNING
        await worker.heartbeater.run_once()  # the reply carries the request
        await async_wait_until(cleaned_up.is_set)
        await async_wait_until(lambda: worker.completer.pending)
        await worker.completer.run_once()
        cancelled = app.get(job.id)
        assert cancelled.state == JobState.CANCELLED and cancelled.attempt == 1
        assert cancelled.errors[-1].kind == "cancelled"
        assert cancelled.progress is not None and cancelled.progress["done"] >= 3
        assert worker.running == {} and worker.producers["default"].free_slots == 10

    run(scenario)


def test_an_async_handler_without_a_context_is_cancelled_at_once(app: due.App) -> None:
    cleaned_up = []

    @app.task(name="wait")
    async def wait() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned_up.append(True)

    async def scenario() -> None:
        job = wait.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        app.cancel(job.id)
        await worker.heartbeater.run_once()
        await settle()
        assert cleaned_up == [True]
        await worker.completer.run_once()
        assert app.get(job.id).state == JobState.CANCELLED

    run(scenario)


def test_an_async_handler_that_ignores_the_request_is_cancelled_after_one_beat(
    app: due.App,
) -> None:
    cleaned_up = []

    @app.task(name="stubborn", lease="3s")  # heartbeats every second
    async def stubborn(ctx: due.Context) -> None:
        try:
            await asyncio.sleep(3600)  # never reaches a safe point
        finally:
            cleaned_up.append(True)

    async def scenario() -> None:
        job = stubborn.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        app.cancel(job.id)
        started = time.monotonic()
        await worker.heartbeater.run_once()
        await settle()
        assert cleaned_up == []  # given a heartbeat's interval to stop by itself
        await async_wait_until(lambda: cleaned_up, timeout=5)
        assert time.monotonic() - started >= 0.9
        await worker.completer.run_once()
        assert app.get(job.id).state == JobState.CANCELLED

    run(scenario)


def test_a_sync_handler_stops_at_its_next_safe_point(app: due.App) -> None:
    rows: list[int] = []
    cleaned_up = threading.Event()

    @app.task(name="copy_rows")
    def copy_rows(ctx: due.Context) -> None:
        try:
            for row in range(100_000):
                rows.append(row)
                time.sleep(0.001)
                ctx.raise_if_cancelled()
        finally:
            cleaned_up.set()

    async def scenario() -> None:
        job = copy_rows.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await async_wait_until(lambda: len(rows) > 3)
        app.cancel(job.id)
        await worker.heartbeater.run_once()
        await async_wait_until(cleaned_up.is_set)
        await async_wait_until(lambda: worker.completer.pending)
        await worker.completer.run_once()
        assert app.get(job.id).state == JobState.CANCELLED
        assert len(rows) < 100_000

    run(scenario)


def test_progress_is_written_with_the_heartbeat_only_when_it_moved(
    app: due.App, clock: FakeClock
) -> None:
    gate = asyncio.Event()

    @app.task(name="import_file")
    async def import_file(ctx: due.Context) -> None:
        ctx.progress(5, 10, "reading")
        await gate.wait()

    async def scenario() -> None:
        job = import_file.enqueue()
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        assert app.get(job.id).progress is None  # kept in memory until the beat
        (running,) = worker.held()
        assert running.lease_with_progress().progress is not None
        running.progress_unsent()  # (as if that beat had failed)
        await worker.heartbeater.run_once()
        assert app.get(job.id).progress == {"done": 5, "total": 10, "message": "reading"}
        assert running.lease_with_progress().progress is None  # unchanged since
        gate.set()
        await settle()
        await worker.completer.run_once()
        assert app.get(job.id).state == JobState.SUCCEEDED

    run(scenario)


def test_a_waiting_parent_holds_no_slot_and_ends_with_its_pieces(app: due.App) -> None:
    @app.task(name="square")
    async def square(n: int) -> int:
        return n * n

    @app.task(name="fan_out")
    async def fan_out(ctx: due.Context) -> None:
        await ctx.spawn("square", [(n,) for n in range(5)])

    async def scenario() -> None:
        parent = fan_out.enqueue()
        worker = make_worker(app, default=1)  # one slot: the pieces need it
        producer = worker.producers["default"]
        for _ in range(200):
            await producer.run_once()
            await settle()
            await worker.completer.run_once()
            if app.get(parent.id).state == JobState.SUCCEEDED:
                break
            await asyncio.sleep(0.002)
        done = app.get(parent.id)
        assert done.state == JobState.SUCCEEDED, done
        assert done.pieces == due.Pieces(total=5, succeeded=5, failed=0)
        assert sorted(j.result for j in app.jobs(parent=parent.id)) == [0, 1, 4, 9, 16]

    run(scenario)


def test_a_job_committing_its_own_transaction_is_not_acknowledged_again(app: due.App) -> None:
    @app.task(name="post_invoice")
    def post_invoice(ctx: due.Context, amount: int) -> None:
        with ctx.transaction() as conn:
            conn.execute("CREATE TABLE invoices (amount integer)")
            conn.execute(f"INSERT INTO invoices VALUES ({int(amount)})")

    async def scenario() -> None:
        job = post_invoice.enqueue(12)
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await async_wait_until(lambda: not worker.running)
        assert worker.completer.pending == []
        assert app.get(job.id).state == JobState.SUCCEEDED
        beat = await worker.heartbeater.run_once()
        assert beat.lost == 0

    run(scenario)
