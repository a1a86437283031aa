"""PostgreSQL connections: the store's own connection (used when free, so a single
enqueue skips the pool) and the pool behind it (for every other thread)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import due
from due.core.records import ClaimRequest
from due.store.postgres.backend import PostgresBackend
from tests.conftest import POSTGRES_BASE_URL
from tests.helpers.database import cut_sessions, rows
from tests.helpers.waiting import wait_until


@pytest.fixture
def named_url(postgres_url: str) -> str:
    """The test's URL with an application name of its own, so that only the
    connections of this test's app can be found and cut."""
    return f"{postgres_url}&application_name=due-conn-{uuid.uuid4().hex[:8]}"


class RollBack(Exception):
    pass


@pytest.mark.parametrize("name", ["", "psql"])
def test_cutting_sessions_refuses_a_name_that_is_not_the_test_s_own(name: str) -> None:
    """The server is every test run's: a name no test made (none, every session
    that sets none) would end other runs' sessions."""
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as bystander:
        with pytest.raises(ValueError, match="application name of the test's own"):
            cut_sessions(POSTGRES_BASE_URL, name)
        assert bystander.execute("SELECT 1").fetchone() == (1,)


def make_app(url: str, clock: due.FakeClock | None = None) -> tuple[due.App, due.Task[..., None]]:
    app = due.App(url, clock=clock)
    app.migrate()

    @app.task(name="t")
    def t(n: int) -> None: ...

    return app, t


def test_an_enqueue_neither_joins_nor_waits_for_another_threads_transaction(
    named_url: str,
) -> None:
    app, t = make_app(named_url)
    backend = app.store.backend
    assert isinstance(backend, PostgresBackend)
    try:
        inside, done = threading.Event(), threading.Event()
        committed: list[bool] = []
        holds_own: list[bool] = []

        def hold_a_transaction() -> None:
            with contextlib.suppress(RollBack), backend.transaction() as tx:
                tx.run("current_time", {"now": None})
                holds_own.append(backend._own.in_use())
                inside.set()
                done.wait(10)
                committed.append(bool(rows(named_url, "SELECT count(*) FROM due_jobs")[0][0]))
                raise RollBack

        holder = threading.Thread(target=hold_a_transaction)
        holder.start()
        assert inside.wait(10)
        job = t.enqueue(1)  # must not wait for the holder, nor ride in its transaction
        done.set()
        holder.join(10)
        assert holds_own == [True], "the transaction should have the store's own connection"
        assert committed == [True], "the enqueue was not committed while the other was open"
        assert app.get(job.id).state == due.JobState.QUEUED, "the rollback took the job along"
    finally:
        app.close()


def test_enqueues_from_many_threads_each_land_once(postgres_url: str) -> None:
    app, t = make_app(postgres_url)
    try:
        ids: list[int] = []
        lock = threading.Lock()

        def enqueue_some(start: int) -> None:
            for n in range(start, start + 100):
                job_id = t.enqueue(n).id
                with lock:
                    ids.append(job_id)

        threads = [threading.Thread(target=enqueue_some, args=(k * 100,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(ids) == len(set(ids)) == 800
        stored = rows(postgres_url, "SELECT payload->'args'->>0 FROM due_jobs")
        assert sorted(int(n) for (n,) in stored) == list(range(800))
    finally:
        app.close()


def test_connections_the_server_ended_while_idle_cost_no_failed_call(named_url: str) -> None:
    """A restart or a failover ends every idle session: the next enqueue, on the
    store's own connection or on one of its pool's, must not be the one that
    finds out (a web request would fail for it)."""
    app, t = make_app(named_url)
    backend = app.store.backend
    assert isinstance(backend, PostgresBackend)
    try:
        t.enqueue(0)  # the store's own connection
        held = [backend._pool.getconn() for _ in range(5)]  # five idle ones in the pool
        for conn in held:
            backend._pool.putconn(conn)
        with backend._own.borrow():  # held here: this enqueue takes the pool's
            t.enqueue(1)
        name = named_url.rsplit("application_name=", 1)[1]
        assert cut_sessions(POSTGRES_BASE_URL, name) >= 6, "own and pooled sessions"
        t.enqueue(2)  # on the own connection again: found ended, replaced
        with backend._own.borrow():
            # From the pool: each ended connection is discarded on checkout and
            # the next taken at once (psycopg_pool's own check waits 1, 2, 4 s
            # between failures: past the checkout timeout of 5 s).
            t.enqueue(3)
        landed = {int(n) for (n,) in rows(named_url, "SELECT payload->'args'->>0 FROM due_jobs")}
        assert landed == {0, 1, 2, 3}
    finally:
        app.close()


def test_the_loop_lane_replaces_a_connection_the_server_ended_while_idle(
    named_url: str,
) -> None:
    """The worker's claims from its event loop: after a restart the next claim
    runs on a new session, not failing over to a thread (nor failing)."""
    app, t = make_app(named_url)
    lane = app.store.loop_lane(1)
    assert lane is not None
    name = named_url.rsplit("application_name=", 1)[1]
    t.enqueue(0)
    t.enqueue(1)

    async def scenario() -> list[int]:
        await lane.open()
        try:
            request = ClaimRequest("default", 1, "looping", 10)
            claimed = [job.id for job in await app.store.job_claim_on_loop(lane, request)]
            assert cut_sessions(POSTGRES_BASE_URL, name) >= 1
            claimed += [job.id for job in await app.store.job_claim_on_loop(lane, request)]
            return claimed
        finally:
            await lane.close()

    try:
        assert len(set(asyncio.run(scenario()))) == 2
    finally:
        app.close()


def test_the_loop_lane_reads_its_rows_in_binary_as_a_thread_reads_them(postgres_url: str) -> None:
    """The lane's rows come in binary (a third faster to load), through cursors
    kept with their connection; the job claimed there is the one a thread's
    claim reads from text."""
    app, t = make_app(postgres_url)
    lane = app.store.loop_lane(1)
    assert lane is not None
    t.enqueue(1)
    t.enqueue(2)
    request = ClaimRequest("default", 1, "looping", 10)

    async def scenario() -> list[Any]:
        await lane.open()
        try:
            async with lane.statement() as tx:
                assert tx.cursor.format == psycopg.pq.Format.BINARY
            async with lane.statement() as again:  # its connection's cursors, kept
                assert again.cursor is tx.cursor
            return await app.store.job_claim_on_loop(lane, request)
        finally:
            await lane.close()

    try:
        (on_loop,) = asyncio.run(scenario())
        (on_thread,) = app.store.job_claim(request)
        assert (on_loop.args, on_thread.args) == ((1,), (2,))
        for name in ("task", "queue", "priority", "kwargs", "attempt", "max_attempts",
                     "lease_token", "scheduled_for", "checkpoint", "parent_id", "completes",
                     "has_pieces"):  # fmt: skip
            assert getattr(on_loop, name) == getattr(on_thread, name), name
        for name in ("lease_expires_at", "run_at", "created_at"):
            moment = getattr(on_loop, name)
            assert type(moment) is type(getattr(on_thread, name))
            assert moment.utcoffset() == getattr(on_thread, name).utcoffset() == timedelta(0)
    finally:
        app.close()


def pool_requests(app: due.App) -> int:
    return int(app.store.backend._pool.get_stats().get("requests_num", 0))  # type: ignore[attr-defined]


def test_single_enqueues_skip_the_pool(postgres_url: str) -> None:
    app, t = make_app(postgres_url)
    try:
        t.enqueue(0)
        before = pool_requests(app)
        for n in range(1, 6):
            t.enqueue(n)
        assert pool_requests(app) == before
        assert len(app.jobs()) == 6
    finally:
        app.close()


def test_a_transaction_left_open_or_failed_does_not_reach_the_next_user(
    postgres_url: str,
) -> None:
    app, t = make_app(postgres_url)
    own = app.store.backend._own  # type: ignore[attr-defined]
    try:
        with own.borrow() as conn:
            conn.execute("BEGIN")
            conn.execute(
                "INSERT INTO due_jobs (task, queue, payload, run_at, max_attempts, created_at) "
                """VALUES ('t', 'default', '{"args": [0]}', now(), 1, now())"""
            )
        with own.borrow() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            conn.execute("BEGIN")
            with contextlib.suppress(psycopg.errors.DivisionByZero):
                conn.execute("SELECT 1 / 0")
        t.enqueue(1)
        assert [job.args for job in app.jobs()] == [(1,)], "the open transaction was committed"
    finally:
        app.close()


def test_a_closed_store_refuses_work_and_opens_nothing(named_url: str) -> None:
    """A part holding on to the store (a worker's late call) after app.close()."""
    app, t = make_app(named_url)
    job = t.enqueue(0)
    store = app.store
    app.close()
    with pytest.raises(due.StoreUnavailableError, match="closed"):
        store.job_get(job.id)
    name = named_url.rsplit("application_name=", 1)[1]
    query = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'"
    wait_until(lambda: rows(POSTGRES_BASE_URL, query) == [(0,)], timeout=10, what="no sessions")
    with pytest.raises(due.StoreUnavailableError, match="closed"):
        store.job_get(job.id)  # and a second try still opens nothing
    assert rows(POSTGRES_BASE_URL, query) == [(0,)]


def test_the_own_connection_is_renewed_after_an_hour(
    postgres_url: str, clock: due.FakeClock
) -> None:
    app, t = make_app(postgres_url, clock)
    own = app.store.backend._own  # type: ignore[attr-defined]
    try:
        with own.borrow() as conn:
            first = conn.info.backend_pid
        clock.advance("59m")
        with own.borrow() as conn:
            assert conn.info.backend_pid == first
        clock.advance("2m")
        with own.borrow() as conn:
            assert conn.info.backend_pid != first
        t.enqueue(1)
    finally:
        app.close()


def test_statements_prepared_before_a_migration_elsewhere_cost_one_call(postgres_url: str) -> None:
    app, t = make_app(postgres_url)
    try:
        job = t.enqueue(1)
        for _ in range(8):  # past psycopg's prepare threshold: the read is a prepared statement
            app.get(job.id)
        with psycopg.connect(postgres_url, autocommit=True) as other:
            other.execute("ALTER TABLE due_jobs ADD COLUMN added_by_a_newer_version int")
        outcomes = []
        for _ in range(2):
            try:
                outcomes.append(app.get(job.id).id)
            except due.StoreError as error:
                assert "cached plan" in str(error)
                outcomes.append(None)
        assert outcomes[-1] == job.id, outcomes
    finally:
        app.close()


def test_the_stores_sessions_never_compile_statements(postgres_url: str) -> None:
    """JIT compiling cost more than it saved on every statement due runs (0.75 s
    of the 2.3 s the queue figures took with ten million jobs queued)."""
    app, _ = make_app(postgres_url)
    backend: Any = app.store.backend
    with backend.transaction(read=True) as tx:
        tx.cursor.execute("SHOW jit")
        assert tx.cursor.fetchone()["jit"] == "off"
    app.close()
