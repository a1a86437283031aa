"""`await task.aenqueue(...)` without a connection of the caller's: on PostgreSQL
one statement from the caller's event loop, on the store's own connection of
that loop (store/postgres/loop_connections.py), not a thread. The loop's first
enqueue takes a thread; coroutines that enqueue while the connection is busy
wait for it, and are written together (test_enqueue_groups.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import uuid
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import pytest

import due
from due.store.postgres.backend import PostgresBackend
from tests.conftest import POSTGRES_BASE_URL
from tests.helpers.database import cut_sessions, rows
from tests.helpers.waiting import wait_until

T = TypeVar("T")


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor (where asyncio.to_thread sends its calls), counting them."""

    def __init__(self) -> None:
        super().__init__(max_workers=8)
        self.calls = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super().submit(fn, *args, **kwargs)


def run_counting(scenario: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """Run the scenario in a new event loop; with how many calls took a thread."""
    executor = CountingExecutor()

    async def main() -> T:
        asyncio.get_running_loop().set_default_executor(executor)
        return await scenario()

    try:
        return asyncio.run(main()), executor.calls
    finally:
        executor.shutdown()


@pytest.fixture
def named_url(postgres_url: str) -> str:
    """The test's URL with an application name of its own: its sessions can be counted."""
    return f"{postgres_url}&application_name=due-loop-{uuid.uuid4().hex[:8]}"


def make_app(url: str) -> tuple[due.App, due.Task[..., None]]:
    app = due.App(url)
    app.migrate()

    @app.task(name="t")
    def t(n: int) -> None: ...

    return app, t


def sessions(url: str) -> int:
    name = url.rsplit("application_name=", 1)[1]
    query = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'"
    return int(rows(POSTGRES_BASE_URL, query)[0][0])


def an_insert_waits_for(locker: psycopg.Connection[Any]) -> Callable[[], bool]:
    """Whether an insert waits for the lock `locker` holds (only the test's own:
    another test run's insert waiting for a lock of its own is no sign)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE 'INSERT INTO due_jobs%%'"
        " AND %s = ANY(pg_blocking_pids(pid))"
    )
    pid = locker.info.backend_pid

    def waits() -> bool:
        with psycopg.connect(POSTGRES_BASE_URL) as conn:
            row = conn.execute(query, (pid,)).fetchone()
        return bool(row and row[0])

    return waits


def stored(url: str) -> list[int]:
    return sorted(int(n) for (n,) in rows(url, "SELECT payload->'args'->>0 FROM due_jobs"))


def test_after_its_first_an_async_enqueue_takes_no_thread_and_returns_once_committed(
    postgres_url: str,
) -> None:
    app, t = make_app(postgres_url)

    async def scenario() -> list[tuple[int, list[int]]]:
        seen = []
        for n in range(5):
            job = await t.aenqueue(n)
            seen.append((job.id, stored(postgres_url)))  # another session sees it at once
        return seen

    try:
        seen, threads = run_counting(scenario)
        assert threads == 1, "the loop's first enqueue only"
        assert [ids for _, ids in seen] == [list(range(n + 1)) for n in range(5)]
        assert [app.get(job_id).args for job_id, _ in seen] == [(n,) for n in range(5)]
    finally:
        app.close()


def test_on_sqlite_an_async_enqueue_takes_a_thread(sqlite_url: str) -> None:
    app, t = make_app(sqlite_url)
    try:
        job, threads = run_counting(lambda: t.aenqueue(7))
        assert threads == 1
        assert app.get(job.id).args == (7,)
    finally:
        app.close()


def test_async_enqueues_side_by_side_all_land_once(postgres_url: str) -> None:
    """One coroutine at a time has the loop's connection; the others wait for
    its statement and are written together in the next (test_enqueue_groups.py)."""
    app, t = make_app(postgres_url)

    async def scenario() -> list[int]:
        async def some(start: int) -> list[int]:
            return [(await t.aenqueue(n)).id for n in range(start, start + 10)]

        batches = await asyncio.gather(*(some(k * 10) for k in range(20)))
        return [job_id for batch in batches for job_id in batch]

    try:
        ids, threads = run_counting(scenario)
        assert len(set(ids)) == 200
        assert stored(postgres_url) == list(range(200))
        assert threads == 1, "the loop's first enqueue only"
    finally:
        app.close()


def test_each_loop_has_one_connection_closed_once_the_loop_is_gone(named_url: str) -> None:
    app, t = make_app(named_url)
    backend = app.store.backend
    assert isinstance(backend, PostgresBackend)

    async def twice(n: int) -> None:
        await t.aenqueue(n)  # on a thread: the loop's first
        await t.aenqueue(n + 1)  # on the loop's own connection

    try:
        t.enqueue(0)  # the store's own connection
        backend._pool.wait(10)
        before = sessions(named_url)
        _, threads = run_counting(lambda: t.aenqueue(1))
        assert threads == 1 and sessions(named_url) == before, "a loop that enqueues once"
        for n in (2, 4, 6):  # a loop each: asyncio.run closes it after
            _, threads = run_counting(lambda n=n: twice(n))  # type: ignore[misc]
            assert threads == 1
            # The loops before this one are closed: their connections with them.
            wait_until(lambda: sessions(named_url) == before + 1, 10, what="one loop session")
        app.close()
        wait_until(lambda: sessions(named_url) == 0, 10, what="every session closed")
        assert stored(named_url) == list(range(8))
    finally:
        app.close()


def test_a_session_the_server_ended_while_idle_is_replaced_before_use(named_url: str) -> None:
    app, t = make_app(named_url)
    name = named_url.rsplit("application_name=", 1)[1]

    async def scenario() -> None:
        await t.aenqueue(0)  # on a thread: the loop's first
        await t.aenqueue(1)  # opens the loop's connection
        assert cut_sessions(POSTGRES_BASE_URL, name) >= 1  # a restart, a failover
        await t.aenqueue(2)  # must not be the call that finds out

    try:
        _, threads = run_counting(scenario)
        assert threads == 1
        assert stored(named_url) == [0, 1, 2]
    finally:
        app.close()


def test_an_enqueue_cancelled_mid_statement_creates_nothing_and_spoils_nothing(
    postgres_url: str,
) -> None:
    """A request handler cancelled while its enqueue waits: the statement is
    cancelled on the server (no job), and the next enqueue runs on the loop's
    connection, not a thread."""
    app, t = make_app(postgres_url)
    locker = psycopg.connect(postgres_url)

    async def scenario() -> int:
        await t.aenqueue(0)  # on a thread: the loop's first
        await t.aenqueue(1)  # opens the loop's connection
        locker.execute("LOCK TABLE due_jobs IN SHARE MODE")  # inserts wait for it
        waiting = asyncio.create_task(t.aenqueue(9))
        await asyncio.to_thread(wait_until, an_insert_waits_for(locker), 10)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        locker.rollback()
        return (await t.aenqueue(2)).id

    try:
        job_id, threads = run_counting(scenario)
        assert threads == 2, "the loop's first enqueue, and the test's own wait"
        assert app.get(job_id).args == (2,)
        assert stored(postgres_url) == [0, 1, 2], "the cancelled enqueue left a job"
    finally:
        locker.close()
        app.close()


def test_through_a_transaction_pooler_nothing_is_prepared_on_the_loop(pgbouncer_url: str) -> None:
    """More enqueues than psycopg's prepare threshold, through PgBouncer in
    transaction mode, while another client holds the server session they ran
    on: a statement prepared there would be missing on the next one."""
    app, t = make_app(pgbouncer_url)

    async def scenario() -> list[int]:
        ids = [(await t.aenqueue(n)).id for n in range(8)]
        async with await psycopg.AsyncConnection.connect(
            pgbouncer_url.split("?", maxsplit=1)[0]
        ) as other:
            await other.execute("SELECT 1")  # its transaction holds that server session
            ids += [(await t.aenqueue(n)).id for n in range(8, 12)]
            await other.rollback()
        return ids

    try:
        ids, threads = run_counting(scenario)
        assert threads == 1
        assert sorted(job.args[0] for job in app.jobs()) == list(range(12))
        assert len(set(ids)) == 12
    finally:
        app.close()


def test_keyed_jobs_and_batches_take_a_thread_and_keep_their_rules(postgres_url: str) -> None:
    """Only a single job without a key is one statement; a key (settled in a
    transaction) or a batch keeps the thread path, and its rules."""
    app, t = make_app(postgres_url)

    async def scenario() -> tuple[due.Job, due.Job, list[due.Job]]:
        first = await t.options(key="k").aenqueue(1)
        again = await t.options(key="k").aenqueue(2)
        batch = await app.aenqueue_many([t.request(3), t.request(4)])
        return first, again, batch

    try:
        (first, again, batch), threads = run_counting(scenario)
        assert threads == 3
        assert again.id == first.id and again.deduplicated
        assert stored(postgres_url) == [1, 3, 4] and len(batch) == 2
    finally:
        app.close()


def test_the_store_says_which_enqueues_it_sends_from_the_loop(app: due.App, backend: str) -> None:
    """`job_enqueue_on_loop` takes a single job without a key: on PostgreSQL
    from the loop's second enqueue on (None for the first: take a thread); on
    SQLite always (on a thread of its own, grouped with those made meanwhile).
    None for a key and for a batch, on either."""
    t = app.task(name="t")(lambda n: None)
    single = app._prepare([t.request(1)])
    keyed = app._prepare([t.options(key="k").request(2)])
    batch = app._prepare([t.request(3), t.request(4)])

    async def scenario() -> list[list[due.Job] | None]:
        return [await app.store.job_enqueue_on_loop(jobs) for jobs in (single, keyed, batch)]

    first, keyed_sent, batch_sent = asyncio.run(scenario())
    assert keyed_sent is None and batch_sent is None
    if backend == "sqlite":
        assert first is not None and [job.args for job in first] == [(1,)]
    else:
        assert first is None, "the loop's first enqueue takes a thread"

    async def again() -> list[due.Job] | None:
        await app.store.job_enqueue_on_loop(single)  # the loop's first
        return await app.store.job_enqueue_on_loop(single)

    sent = asyncio.run(again())
    assert sent is not None and [job.args for job in sent] == [(1,)]
    assert sent[0].id in [job.id for job in app.jobs()]
    assert len(app.jobs()) == (3 if backend == "sqlite" else 1)


def test_the_loops_sessions_are_set_up_as_the_stores_own(postgres_url: str) -> None:
    """UTC, and the bounds on statements and lock waits (backend.SESSION_SETTINGS)."""
    app, t = make_app(postgres_url)
    backend = app.store.backend
    assert isinstance(backend, PostgresBackend)

    async def scenario() -> list[str]:
        await t.aenqueue(0)
        await t.aenqueue(1)  # opens the loop's connection
        async with backend._loop_connections.borrow() as conn:
            assert conn is not None
            shown = []
            for setting in ("TimeZone", "statement_timeout", "lock_timeout", "jit"):
                cursor = await conn.execute(f"SHOW {setting}")
                shown.append(str((await cursor.fetchone())[0]))  # type: ignore[index]
            return shown

    try:
        shown, _ = run_counting(scenario)
        assert shown == ["UTC", "1min", "30s", "off"]
    finally:
        app.close()


def test_the_loops_connection_is_renewed_after_an_hour(
    postgres_url: str, clock: due.FakeClock
) -> None:
    app = due.App(postgres_url, clock=clock)
    app.migrate()
    t = app.task(name="t")(lambda n: None)
    backend = app.store.backend
    assert isinstance(backend, PostgresBackend)

    async def pid() -> int:
        await t.aenqueue(0)  # the loop's first, if it is (a thread)
        async with backend._loop_connections.borrow() as conn:
            assert conn is not None
            return conn.info.backend_pid

    async def scenario() -> tuple[int, int, int]:
        first = await pid()
        clock.advance("59m")
        same = await pid()
        clock.advance("2m")
        return first, same, await pid()

    try:
        (first, same, renewed), _ = run_counting(scenario)
        assert same == first and renewed != first
    finally:
        app.close()


def test_a_store_closed_while_a_loop_enqueues_closes_that_connection_after(
    named_url: str,
) -> None:
    """app.close() from another thread while a loop's statement runs: the
    statement finishes (its job is written and returned), then its borrower
    closes the connection; no session is left."""
    app, t = make_app(named_url)
    locker = psycopg.connect(named_url)

    async def scenario() -> due.Job:
        await t.aenqueue(0)  # on a thread: the loop's first
        await t.aenqueue(1)  # opens the loop's connection
        locker.execute("LOCK TABLE due_jobs IN SHARE MODE")
        waiting = asyncio.create_task(t.aenqueue(2))
        await asyncio.to_thread(wait_until, an_insert_waits_for(locker), 10)
        await asyncio.to_thread(app.close)  # another thread, as at shutdown
        locker.rollback()
        return await waiting

    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            job, _ = run_counting(scenario)
            gc.collect()  # a connection nobody closed would be closed here, with a warning
        assert not [w for w in warned if "still open" in str(w.message)]
        assert job.args == (2,)
        locker.close()
        assert stored(named_url) == [0, 1, 2]
        wait_until(lambda: sessions(named_url) == 0, 10, what="every session closed")
    finally:
        locker.close()
        app.close()
