"""Transactional enqueue: the job exists if and only if the caller's transaction commits."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import due
from due.store.postgres.backend import MANY_BATCH
from due.store.sqlite.backend import path_from_url
from tests.conftest import made_schema, postgres_schema_url
from tests.helpers.waiting import wait_until


class Abort(Exception):
    pass


@pytest.fixture
def postgres_app(postgres_url: str) -> due.App:
    app = due.App(postgres_url)
    app.migrate()
    yield app
    app.close()


@pytest.fixture
def sqlite_app(sqlite_url: str) -> due.App:
    app = due.App(sqlite_url)
    app.migrate()
    yield app
    app.close()


def register(app: due.App) -> due.Task:
    @app.task(name="ship")
    def ship(order: int) -> None: ...

    return ship


def test_postgres_job_commits_with_the_business_change(postgres_app: due.App) -> None:
    ship = register(postgres_app)
    with psycopg.connect(postgres_app.url) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        conn.commit()
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES (1)")
            committed = ship.options(connection=conn).enqueue(1)
        with pytest.raises(Abort), conn.transaction():
            conn.execute("INSERT INTO orders VALUES (2)")
            rolled_back = ship.options(connection=conn).enqueue(2)
            raise Abort
        assert [row[0] for row in conn.execute("SELECT id FROM orders")] == [1]
    assert postgres_app.get(committed.id).args == (1,)
    with pytest.raises(due.JobNotFoundError):
        postgres_app.get(rolled_back.id)


def test_postgres_notification_is_sent_only_on_commit(postgres_app: due.App) -> None:
    ship = register(postgres_app)
    channel = postgres_app.store.backend.channel_name("due_jobs")  # type: ignore[attr-defined]
    with postgres_app.store.backend.listen_connection() as listener:  # type: ignore[attr-defined]
        with psycopg.connect(postgres_app.url) as conn:
            with pytest.raises(Abort), conn.transaction():
                ship.options(connection=conn).enqueue(1)
                raise Abort
            assert list(listener.notifies(timeout=0.2)) == []
            ship.options(connection=conn, queue="shipping").enqueue(2)
            conn.commit()
        (note,) = list(listener.notifies(timeout=2, stop_after=1))
        assert note.channel == channel and note.payload.startswith("shipping ")


def test_a_postgres_bulk_enqueue_wakes_each_queue_once(postgres_app: due.App) -> None:
    """The README's promise: many enqueuing processes are cheaper in batches, since
    `app.enqueue_many` sends one wake-up per queue a call, not one per job."""
    ship = register(postgres_app)
    # Each its own due time: one wake-up a job would be 200 notifications, since
    # PostgreSQL folds only identical ones sent in one transaction.
    due_at = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i) for i in range(200)]
    requests = [
        ship.options(queue=("mail", "bulk")[i % 2], run_at=due_at[i]).request(i) for i in range(200)
    ]
    with postgres_app.store.backend.listen_connection() as listener:  # type: ignore[attr-defined]
        postgres_app.enqueue_many(requests)
        notes = list(listener.notifies(timeout=1))
    assert sorted(note.payload.split()[0] for note in notes) == ["bulk", "mail"]


def test_postgres_notification_names_due_s_schema_whatever_the_connection_searches_first(
    postgres_app: due.App, postgres_schema: str
) -> None:
    """A caller's connection that searches public before due's schema still
    notifies the channel due's workers listen on."""
    ship = register(postgres_app)
    mixed = postgres_schema_url(f"public,{postgres_schema}")
    with postgres_app.store.backend.listen_connection() as listener:  # type: ignore[attr-defined]
        with psycopg.connect(mixed) as conn:
            assert conn.execute("SELECT current_schema()").fetchone() == ("public",)
            ship.options(connection=conn, queue="shipping").enqueue(1)
            conn.commit()
        (note,) = list(listener.notifies(timeout=2, stop_after=1))
        assert note.payload.startswith("shipping ")


def test_postgres_notification_names_the_schema_the_caller_s_connection_writes_to(
    postgres_app: due.App,
) -> None:
    """A caller's connection that finds another deployment's `due_jobs` first
    writes the job there, and wakes that deployment's workers, not this one's."""
    ship = register(postgres_app)
    with made_schema() as schema:
        neighbour = due.App(postgres_schema_url(schema))
        try:
            neighbour.migrate()
            register(neighbour)
            with (
                neighbour.store.backend.listen_connection() as theirs,  # type: ignore[attr-defined]
                postgres_app.store.backend.listen_connection() as ours,  # type: ignore[attr-defined]
                psycopg.connect(postgres_schema_url(schema)) as conn,
            ):
                job = ship.options(connection=conn, queue="shipping").enqueue(1)
                conn.commit()
                (note,) = list(theirs.notifies(timeout=2, stop_after=1))
                assert note.payload.startswith("shipping ")
                assert list(ours.notifies(timeout=0.2)) == []
            assert neighbour.get(job.id).args == (1,)
        finally:
            neighbour.close()


def test_postgres_async_connection(postgres_app: due.App) -> None:
    ship = register(postgres_app)

    async def scenario() -> tuple[due.Job, due.Job]:
        async with await psycopg.AsyncConnection.connect(postgres_app.url) as conn:
            async with conn.transaction():
                kept = await ship.options(connection=conn).aenqueue(1)
            try:
                async with conn.transaction():
                    dropped = await ship.options(connection=conn).aenqueue(2)
                    raise Abort
            except Abort:
                pass
            return kept, dropped

    kept, dropped = asyncio.run(scenario())
    assert postgres_app.get(kept.id).state == due.JobState.QUEUED
    with pytest.raises(due.JobNotFoundError):
        postgres_app.get(dropped.id)


def test_postgres_big_batches_on_the_callers_connections(postgres_app: due.App) -> None:
    """Several pipelined statements each, in the caller's transaction, sync and
    async: they commit and roll back with it. A bad request among them is
    refused before anything is sent, so the caller's transaction goes on."""
    ship = register(postgres_app)
    count = 3 * MANY_BATCH

    def batch(first: int) -> list[due.JobRequest]:
        return [ship.request(n) for n in range(first, first + count)]

    with psycopg.connect(postgres_app.url) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        with conn.transaction():
            kept = postgres_app.enqueue_many(batch(0), connection=conn)
        with pytest.raises(Abort), conn.transaction():
            postgres_app.enqueue_many(batch(count), connection=conn)
            raise Abort
        with conn.transaction():
            bad = [*batch(0)[:-1], ship.request(object())]
            with pytest.raises(due.PayloadError):
                postgres_app.enqueue_many(bad, connection=conn)
            conn.execute("INSERT INTO orders VALUES (1)")  # the transaction is still good

        async def in_async_transactions() -> list[due.Job]:
            async with await psycopg.AsyncConnection.connect(postgres_app.url) as aconn:
                async with aconn.transaction():
                    kept = await postgres_app.aenqueue_many(batch(10_000), connection=aconn)
                with contextlib.suppress(Abort):
                    async with aconn.transaction():
                        await postgres_app.aenqueue_many(batch(20_000), connection=aconn)
                        raise Abort
            return kept

        kept += asyncio.run(in_async_transactions())
        assert conn.execute("SELECT id FROM orders").fetchall() == [(1,)]
    stored = {job.id: job.args for job in postgres_app.jobs(limit=10 * count)}
    assert [stored[job.id] for job in kept] == [job.args for job in kept]
    assert sorted(args for (args,) in stored.values()) == [
        *range(count),
        *range(10_000, 10_000 + count),
    ]


def test_aenqueue_without_a_connection(postgres_app: due.App) -> None:
    ship = register(postgres_app)
    job = asyncio.run(ship.aenqueue(3))
    assert postgres_app.get(job.id).args == (3,)


def test_sqlite_job_commits_with_the_business_change(sqlite_app: due.App) -> None:
    ship = register(sqlite_app)
    conn = sqlite3.connect(path_from_url(sqlite_app.url))
    try:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")
        committed = ship.options(connection=conn).enqueue(1)
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (2)")
        rolled_back = ship.options(connection=conn).enqueue(2)
        conn.rollback()
        assert [row[0] for row in conn.execute("SELECT id FROM orders")] == [1]
    finally:
        conn.close()
    assert sqlite_app.get(committed.id).args == (1,)
    with pytest.raises(due.JobNotFoundError):
        sqlite_app.get(rolled_back.id)


def test_sqlite_a_limited_job_in_the_callers_write_transaction_does_not_wait_for_itself(
    sqlite_url: str,
) -> None:
    """An app's first enqueue writes its limits first, on its own connection:
    inside the caller's SQLite write transaction that would wait for the
    caller's own lock (and fail after the busy timeout). The workers write
    them as they start instead, and the app's next enqueue of its own does."""
    app = due.App(sqlite_url, store_options={"busy_timeout": 1.0})
    app.migrate()
    app.limit("mail", concurrency=2)

    @app.task(name="mail", limits=["mail"])
    def mail(to: str) -> None: ...

    conn = sqlite3.connect(path_from_url(app.url), timeout=1)
    try:
        conn.execute("CREATE TABLE signups (email TEXT)")
        conn.commit()
        conn.execute("INSERT INTO signups VALUES ('a@example.com')")  # holds the write lock
        job = mail.options(connection=conn).enqueue("a@example.com")
        conn.commit()
    finally:
        conn.close()
    assert app.get(job.id).limits == (("mail", None),)
    assert app.limit_overview() == []  # not written yet: that would have waited for itself
    mail.enqueue("b@example.com")
    assert [limit.name for limit in app.limit_overview()] == ["mail"]
    app.close()


def test_get_on_the_callers_connection_sees_its_uncommitted_job(
    sqlite_app: due.App, postgres_app: due.App
) -> None:
    """Read your own writes: inside the transaction that enqueued it, a job is
    found on that transaction's connection (a test wrapped in a transaction, a
    view that enqueues and then looks), and nowhere else until the commit."""
    sqlite_conn = sqlite3.connect(path_from_url(sqlite_app.url))
    postgres_conn = psycopg.connect(postgres_app.url)
    for app, conn in ((sqlite_app, sqlite_conn), (postgres_app, postgres_conn)):
        ship = register(app)
        try:
            job = ship.options(connection=conn).enqueue(7)
            seen = app.get(job.id, connection=conn)
            assert (seen.id, seen.args, seen.state) == (job.id, (7,), due.JobState.QUEUED)
            assert seen.created_at.tzinfo is not None
            with pytest.raises(due.JobNotFoundError):
                app.get(job.id)
            conn.commit()
            assert app.get(job.id).args == (7,)
        finally:
            conn.close()


def test_postgres_a_connection_set_up_by_a_framework_reads_as_due_s_own(
    postgres_app: due.App,
) -> None:
    """A framework may change a connection's loaders and cursor class (Django
    loads jsonb as text and binds parameters on the client): due's statements
    on it still read JSON as values and times as aware datetimes."""
    from psycopg.types.string import TextLoader

    ship = register(postgres_app)
    done = ship.enqueue(1)
    postgres_app.cancel(done.id)  # a job with a history of errors
    conn = psycopg.connect(postgres_app.url, cursor_factory=psycopg.ClientCursor)
    conn.adapters.register_loader("jsonb", TextLoader)
    conn.adapters.register_loader("timestamptz", TextLoader)
    try:
        first = ship.options(connection=conn, key="framework").enqueue(2)
        again = ship.options(connection=conn, key="framework").enqueue(2)  # read back
        seen = postgres_app.get(done.id, connection=conn)
        conn.commit()
    finally:
        conn.close()
    assert again.id == first.id and again.deduplicated and again.args == (2,)
    assert seen.args == (1,) and seen.kwargs == {} and seen.state == due.JobState.CANCELLED
    assert seen.created_at.tzinfo is not None


def test_a_connection_of_the_wrong_kind_is_refused(
    sqlite_app: due.App, postgres_app: due.App
) -> None:
    sqlite_ship, postgres_ship = register(sqlite_app), register(postgres_app)
    conn = sqlite3.connect(":memory:")
    with pytest.raises(due.ConfigurationError, match=r"takes a psycopg\.Connection"):
        postgres_ship.options(connection=conn).enqueue(1)
    with (
        psycopg.connect(postgres_app.url) as pg,
        pytest.raises(due.ConfigurationError, match=r"takes a sqlite3\.Connection"),
    ):
        sqlite_ship.options(connection=pg).enqueue(1)
    with pytest.raises(due.ConfigurationError, match="no async connections"):
        asyncio.run(sqlite_ship.options(connection=conn).aenqueue(1))
    assert sqlite_app.jobs() == [] and postgres_app.jobs() == []


# A bulk enqueue on the caller's connection refused half way (a row the database
# refuses, after batches already sent): it leaves nothing, and the caller's
# transaction goes on with its own work.

REFUSE_POSTGRES = "ALTER TABLE due_jobs ADD CONSTRAINT no_refused CHECK (task <> 'refused')"
# RAISE(ABORT) undoes only the statement it is in: rows inserted before stay.
REFUSE_SQLITE = (
    "CREATE TRIGGER refuse BEFORE INSERT ON due_jobs WHEN NEW.task = 'refused'"
    " BEGIN SELECT RAISE(ABORT, 'no_refused'); END"
)


def refused_half_way(app: due.App) -> list[due.JobRequest]:
    """Rows enough for several statements, the last one refused by the database."""
    ship = register(app)
    refused = app.task(name="refused")(lambda n: None)
    return [*(ship.request(n) for n in range(3 * MANY_BATCH)), refused.request(0)]


def test_postgres_a_bulk_enqueue_refused_half_way_leaves_nothing(postgres_app: due.App) -> None:
    requests = refused_half_way(postgres_app)
    with psycopg.connect(postgres_app.url) as conn:
        conn.execute(REFUSE_POSTGRES)
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")
        with pytest.raises(due.StoreError, match="no_refused"):
            postgres_app.enqueue_many(requests, connection=conn)
        conn.execute("INSERT INTO orders VALUES (2)")  # the transaction is still good
        conn.commit()
        assert conn.execute("SELECT id FROM orders ORDER BY id").fetchall() == [(1,), (2,)]
    with psycopg.connect(postgres_app.url, autocommit=True) as conn:
        with pytest.raises(due.StoreError, match="no_refused"):
            postgres_app.enqueue_many(requests, connection=conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with conn.transaction():  # in autocommit, inside a transaction of the caller's
            conn.execute("INSERT INTO orders VALUES (5)")
            with pytest.raises(due.StoreError, match="no_refused"):
                postgres_app.enqueue_many(requests, connection=conn)
            conn.execute("INSERT INTO orders VALUES (6)")

    async def on_an_async_connection() -> None:
        async with await psycopg.AsyncConnection.connect(postgres_app.url) as aconn:
            await aconn.execute("INSERT INTO orders VALUES (3)")
            with pytest.raises(due.StoreError, match="no_refused"):
                await postgres_app.aenqueue_many(requests, connection=aconn)
            await aconn.execute("INSERT INTO orders VALUES (4)")
            await aconn.commit()

    asyncio.run(on_an_async_connection())
    assert postgres_app.jobs(limit=10) == []
    with psycopg.connect(postgres_app.url) as conn:
        assert len(conn.execute("SELECT id FROM orders").fetchall()) == 6


def test_sqlite_a_bulk_enqueue_refused_half_way_leaves_nothing(sqlite_app: due.App) -> None:
    requests = refused_half_way(sqlite_app)
    path = path_from_url(sqlite_app.url)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(REFUSE_SQLITE)
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO orders VALUES (1)")
        with pytest.raises(due.StoreError, match="no_refused"):
            sqlite_app.enqueue_many(requests, connection=conn)
        conn.execute("INSERT INTO orders VALUES (2)")
        conn.execute("COMMIT")
        with pytest.raises(due.StoreError, match="no_refused"):  # in autocommit
            sqlite_app.enqueue_many(requests, connection=conn)
        assert not conn.in_transaction
    # Python's implicit transactions, none open yet: the enqueue opens the
    # caller's, which their commit or rollback ends.
    with contextlib.closing(sqlite3.connect(path)) as conn:
        with pytest.raises(due.StoreError, match="no_refused"):
            sqlite_app.enqueue_many(requests, connection=conn)
        conn.execute("INSERT INTO orders VALUES (3)")
        conn.commit()
        sqlite_app.enqueue_many(requests[:-1], connection=conn)
        assert conn.in_transaction
        conn.rollback()
        assert [row[0] for row in conn.execute("SELECT id FROM orders")] == [1, 2, 3]
    assert sqlite_app.jobs(limit=10) == []


def test_postgres_a_batch_on_an_autocommit_connection_another_thread_is_using(
    postgres_app: due.App,
) -> None:
    """psycopg lets threads share a connection, each statement after the other:
    the batch waits for the running one, and is a transaction of its own."""
    ship = register(postgres_app)
    with psycopg.connect(postgres_app.url, autocommit=True) as conn:
        sleeper = threading.Thread(target=conn.execute, args=("SELECT pg_sleep(1)",))
        sleeper.start()
        wait_until(lambda: conn.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE, 10)
        jobs = postgres_app.enqueue_many([ship.request(1), ship.request(2)], connection=conn)
        sleeper.join(10)
    assert sorted(postgres_app.get(job.id).args for job in jobs) == [(1,), (2,)]


def test_postgres_a_conflict_on_the_callers_connection_says_to_roll_it_back(
    postgres_app: due.App,
) -> None:
    """A deadlock or serialization failure ends a statement of the caller's
    transaction, not the transaction: it is theirs to roll back and run again.
    A batch's savepoint is undone and the transaction goes on."""
    ship = register(postgres_app)
    conflicted = postgres_app.task(name="conflicted")(lambda n: None)
    with psycopg.connect(postgres_app.url) as conn:
        conn.execute(
            "CREATE FUNCTION conflict() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " RAISE EXCEPTION 'made up' USING ERRCODE = '40001'; END $$;"
            " CREATE TRIGGER conflict BEFORE INSERT ON due_jobs FOR EACH ROW"
            " WHEN (NEW.task = 'conflicted') EXECUTE FUNCTION conflict()"
        )
        conn.commit()
        batch = [ship.request(1), conflicted.request(2)]
        with pytest.raises(due.StoreConflictError, match="roll your transaction back"):
            postgres_app.enqueue_many(batch, connection=conn)
        kept = ship.options(connection=conn).enqueue(3)  # the transaction goes on
        conn.commit()
        with pytest.raises(due.StoreConflictError, match="roll your transaction back"):
            conflicted.options(connection=conn).enqueue(4)
        conn.rollback()
    assert [job.id for job in postgres_app.jobs(limit=10)] == [kept.id]


@pytest.mark.parametrize("autocommit", [False, True], ids=["transaction", "autocommit"])
def test_postgres_enqueues_inside_the_callers_pipeline(
    postgres_app: due.App, autocommit: bool
) -> None:
    """In pipeline mode a statement's result comes only at a sync: each step
    that needs the one before (a keyed job's conflict, a batch's reserved ids)
    still gets it, a handle is never "not stored" for a row that is, and a
    refused batch leaves nothing while the caller's work goes on."""
    requests = refused_half_way(postgres_app)  # registers ship
    ship = postgres_app.tasks.get("ship")
    with psycopg.connect(postgres_app.url, autocommit=True) as setup:
        setup.execute(REFUSE_POSTGRES)
        setup.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    with psycopg.connect(postgres_app.url, autocommit=autocommit) as conn:
        with conn.pipeline():
            conn.execute("INSERT INTO orders VALUES (1)")
            one = ship.options(connection=conn).enqueue(1)
            keyed = ship.options(connection=conn, key="order-2").enqueue(2)
            again = ship.options(connection=conn, key="order-2").enqueue(2)
            many = postgres_app.enqueue_many([ship.request(n) for n in (3, 4, 5)], connection=conn)
            with pytest.raises(due.StoreError, match="no_refused"):
                postgres_app.enqueue_many(requests, connection=conn)
            conn.execute("INSERT INTO orders VALUES (2)")
        conn.commit()
        assert conn.execute("SELECT id FROM orders ORDER BY id").fetchall() == [(1,), (2,)]
    assert again.deduplicated and again.id == keyed.id
    stored = {job.id: job.args for job in postgres_app.jobs(limit=100)}
    assert stored == {job.id: job.args for job in (one, keyed, *many)}
    assert sorted(stored.values()) == [(1,), (2,), (3,), (4,), (5,)]


def test_postgres_aenqueue_inside_the_callers_async_pipeline(postgres_app: due.App) -> None:
    ship = register(postgres_app)

    async def scenario() -> list[due.Job]:
        async with await psycopg.AsyncConnection.connect(postgres_app.url) as conn:
            async with conn.pipeline():
                one = await ship.options(connection=conn).aenqueue(1)
                keyed = await ship.options(connection=conn, key="k").aenqueue(2)
                again = await ship.options(connection=conn, key="k").aenqueue(2)
                requests = [ship.request(n) for n in (3, 4)]
                many = await postgres_app.aenqueue_many(requests, connection=conn)
            await conn.commit()
        assert again.deduplicated and again.id == keyed.id
        return [one, keyed, *many]

    created = asyncio.run(scenario())
    stored = {job.id: job.args for job in postgres_app.jobs(limit=100)}
    assert stored == {job.id: job.args for job in created}
    assert sorted(stored.values()) == [(1,), (2,), (3,), (4,)]


def test_postgres_an_enqueue_in_an_autocommit_pipeline_commits_nothing_of_its_own(
    postgres_app: due.App,
) -> None:
    """Between two syncs an autocommit pipeline is one implicit transaction: an
    enqueue inside it (one job, or a keyed one, several statements) reads its
    results without a sync, so a statement of the caller's failing after it
    leaves nothing, as it would have without the enqueue."""
    ship = register(postgres_app)
    with psycopg.connect(postgres_app.url, autocommit=True) as setup:
        setup.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        setup.execute("INSERT INTO orders VALUES (100)")
    with psycopg.connect(postgres_app.url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UniqueViolation), conn.pipeline():
            conn.execute("INSERT INTO orders VALUES (1)")
            one = ship.options(connection=conn).enqueue(1)
            keyed = ship.options(connection=conn, key="order-2").enqueue(2)
            conn.execute("INSERT INTO orders VALUES (100)")  # refused: ends it all
        assert conn.execute("SELECT id FROM orders ORDER BY id").fetchall() == [(100,)]
    assert one.id != keyed.id
    assert postgres_app.jobs(limit=10) == []
