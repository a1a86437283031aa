"""Enqueue on SQLAlchemy's connections and sessions: the job exists if and only if
the caller's transaction commits, on every driver due runs on."""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_scoped_session, async_sessionmaker
from sqlalchemy.orm import Session

import due
from due.store.postgres.backend import MANY_BATCH
from due.store.sqlite.backend import path_from_url
from tests.conftest import made_schema, postgres_schema_url
from tests.helpers.sqlalchemy_engines import (
    ASYNC_DRIVERS,
    async_engine,
    search_path,
    sync_engine,
)

ASYNC_CASES = [
    ("sqlite", "aiosqlite"),
    ("postgres", "asyncpg"),
    ("postgres", "psycopg_async"),
]


class Abort(Exception):
    pass


@pytest.fixture
def ship(app: due.App) -> due.Task:
    @app.task(name="ship")
    def ship(order: int) -> None: ...

    return ship


@pytest.fixture
def engine(app: due.App) -> Iterator[Any]:
    engine = sync_engine(app.url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE orders (id integer PRIMARY KEY)")
    yield engine
    engine.dispose()


def present(app: due.App, job: due.Job) -> bool:
    """Whether this job (not a later one given its id back: SQLite reuses the id
    of a rolled-back row) is stored."""
    try:
        return app.get(job.id).args == job.args
    except due.JobNotFoundError:
        return False


def orders(engine: Any) -> list[int]:
    with engine.connect() as conn:
        return [row[0] for row in conn.exec_driver_sql("SELECT id FROM orders ORDER BY id")]


def refuse_in_the_database(app: due.App, engine: Any) -> None:
    """A trigger refuses the jobs of the task named "refused" (mid-statement)."""
    triggers = (
        [
            "CREATE TRIGGER refuse BEFORE INSERT ON due_jobs WHEN NEW.task = 'refused'"
            " BEGIN SELECT RAISE(ABORT, 'no_refused'); END"
        ]
        if app.url.startswith("sqlite")
        else [
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.task"
            " = 'refused' THEN RAISE EXCEPTION 'no_refused'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER refuse BEFORE INSERT ON due_jobs FOR EACH ROW"
            " EXECUTE FUNCTION refuse()",
        ]
    )
    with engine.begin() as conn:
        for statement in triggers:
            conn.exec_driver_sql(statement)


def test_a_session_s_job_commits_and_rolls_back_with_its_rows(
    app: due.App, ship: due.Task, engine: Any
) -> None:
    with Session(engine) as session:
        session.execute(text("INSERT INTO orders VALUES (1)"))
        kept = ship.options(connection=session).enqueue(1)
        assert app.get(kept.id, connection=session).state == due.JobState.QUEUED  # (uncommitted)
        session.commit()
    with Session(engine) as session:
        session.execute(text("INSERT INTO orders VALUES (2)"))
        dropped = ship.options(connection=session).enqueue(2)
        session.rollback()
    assert orders(engine) == [1]
    assert present(app, kept) and not present(app, dropped)


def test_a_connection_not_yet_in_a_transaction_begins_one(
    app: due.App, ship: due.Task, engine: Any
) -> None:
    with engine.connect() as conn:
        first = ship.options(connection=conn).enqueue(1)  # due's statement comes first
        assert conn.in_transaction()
        conn.commit()
    with engine.connect() as conn:
        unsaved = ship.options(connection=conn).enqueue(2)
    # (closed without a commit: rolled back, as SQLAlchemy does with its own)
    assert present(app, first) and not present(app, unsaved)


def test_a_bulk_on_a_connection_is_all_or_none_in_the_callers_transaction(
    app: due.App, ship: due.Task, engine: Any
) -> None:
    refused = app.task(name="refused")(lambda n: None)
    requests = [*(ship.request(n) for n in range(2 * MANY_BATCH + 1)), refused.request(0)]
    refuse_in_the_database(app, engine)
    with Session(engine) as session:
        session.execute(text("INSERT INTO orders VALUES (1)"))
        with pytest.raises(due.StoreError, match="no_refused"):
            app.enqueue_many(requests, connection=session)
        session.execute(text("INSERT INTO orders VALUES (2)"))  # the transaction goes on
        made = app.enqueue_many(requests[:-1], connection=session)
        session.commit()
    assert orders(engine) == [1, 2]
    assert len(made) == 2 * MANY_BATCH + 1
    with engine.connect() as conn:  # the refused bulk left nothing
        assert conn.exec_driver_sql("SELECT count(*) FROM due_jobs").scalar() == len(made)


@pytest.mark.parametrize(("backend", "driver"), ASYNC_CASES)
def test_an_async_session_s_job_commits_and_rolls_back_with_its_rows(
    app: due.App, ship: due.Task, engine: Any, driver: str
) -> None:
    async def work() -> tuple[due.Job, due.Job, due.Job, list[due.Job]]:
        aengine = async_engine(app.url, driver)
        try:
            async with AsyncSession(aengine) as session:
                await session.execute(text("INSERT INTO orders VALUES (1)"))
                kept = await ship.options(connection=session).aenqueue(1)
                await session.commit()
            async with AsyncSession(aengine) as session:
                dropped = await ship.options(connection=session).aenqueue(2)
                await session.rollback()
            async with aengine.connect() as conn:  # due's statement first: asyncpg has
                first = await ship.options(connection=conn).aenqueue(3)  # no implicit BEGIN
                bulk = await app.aenqueue_many(
                    [ship.request(n) for n in range(MANY_BATCH + 5)], connection=conn
                )
                await conn.commit()
            async with aengine.connect() as conn:
                unsaved = await ship.options(connection=conn).aenqueue(4)
            return kept, dropped, first, [*bulk, unsaved]
        finally:
            await aengine.dispose()

    kept, dropped, first, [*bulk, unsaved] = asyncio.run(work())
    assert orders(engine) == [1]
    assert present(app, kept) and present(app, first) and all(present(app, j) for j in bulk)
    assert not present(app, dropped) and not present(app, unsaved)


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("driver", ASYNC_DRIVERS["postgres"])
def test_the_wake_up_is_sent_at_the_commit(app: due.App, ship: due.Task, driver: str) -> None:
    listen = app.store.backend.listen_connection  # type: ignore[attr-defined]

    async def enqueue(commit: bool) -> None:
        aengine = async_engine(app.url, driver)
        async with AsyncSession(aengine) as session:
            await ship.options(connection=session, queue="mail").aenqueue(1)
            await (session.commit() if commit else session.rollback())
        await aengine.dispose()

    with listen() as listener:
        asyncio.run(enqueue(commit=False))
        assert list(listener.notifies(timeout=0.2)) == []
        asyncio.run(enqueue(commit=True))
        (note,) = list(listener.notifies(timeout=2, stop_after=1))
    assert note.payload.startswith("mail ")


def test_a_connection_to_another_database_is_refused(
    app: due.App, ship: due.Task, tmp_path: Any
) -> None:
    if app.url.startswith("sqlite"):
        elsewhere = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'other.db'}")
        unusable = sqlalchemy.create_engine("sqlite://")
        wrong_kind = sqlalchemy.create_engine("postgresql+psycopg://127.0.0.1:5432/due_test")
    else:
        elsewhere = sqlalchemy.create_engine("postgresql+psycopg://127.0.0.1:5432/postgres")
        unusable = sqlalchemy.create_engine(
            f"postgresql+pg8000://{getpass.getuser()}@127.0.0.1:5432/due_test"
        )
        wrong_kind = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'other.db'}")
    refusals = [
        (elsewhere, "another database than this App's"),
        (wrong_kind, "but this App's database is"),
        # SQLite: an in-memory database; PostgreSQL: a driver due does not run on
        (unusable, "another database" if app.url.startswith("sqlite") else "pg8000 driver"),
    ]
    for engine, refusal in refusals:
        with engine.connect() as conn, pytest.raises(due.ConfigurationError, match=refusal):
            ship.options(connection=conn).enqueue(1)
    assert app.jobs(limit=5) == []


def test_the_app_s_database_however_its_url_spells_it_is_accepted(
    app: due.App, ship: due.Task
) -> None:
    """The database is asked which it is: a URL that names it another way (the
    database given apart from the URL, another host name; a SQLite URI) is
    the App's, and one that leaves it to defaults is checked all the same."""
    if app.url.startswith("sqlite"):
        path = path_from_url(app.url)
        same = sqlalchemy.create_engine(f"sqlite:///file:{path}?uri=true")
        other = None
    else:
        schema = search_path(app.url)
        options = {"options": f"-csearch_path={schema}"}
        same = sqlalchemy.create_engine(
            "postgresql+psycopg://localhost:5432/", connect_args={**options, "dbname": "due_test"}
        )
        other = sqlalchemy.create_engine(  # no database in the URL: given apart
            "postgresql+psycopg://127.0.0.1:5432/", connect_args={"dbname": "postgres"}
        )
    with same.connect() as conn:
        job = ship.options(connection=conn).enqueue(1)
        conn.commit()
    assert present(app, job)
    if other is not None:
        with other.connect() as conn, pytest.raises(due.ConfigurationError, match="another"):
            ship.options(connection=conn).enqueue(2)


def test_a_connection_in_autocommit_keeps_a_bulk_all_or_none(
    app: due.App, ship: due.Task, engine: Any
) -> None:
    """No transaction to join: each enqueue commits on its own, and a bulk in a
    transaction of its own (not a savepoint, which needs one)."""
    refused = app.task(name="refused")(lambda n: None)
    refuse_in_the_database(app, engine)
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    with autocommit.connect() as conn:
        made = app.enqueue_many([ship.request(n) for n in range(3)], connection=conn)
        with pytest.raises(due.StoreError, match="no_refused"):
            app.enqueue_many([ship.request(9), refused.request(0)], connection=conn)
        conn.rollback()  # nothing to roll back: they were committed
    assert all(present(app, job) for job in made)
    assert len(app.jobs(limit=10)) == 3


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_connection_whose_database_lacks_due_s_tables_says_so(
    app: due.App, ship: due.Task
) -> None:
    with made_schema() as bare:  # the same database; due's tables not on its search_path
        engine = sync_engine(postgres_schema_url(bare))
        with engine.connect() as conn, pytest.raises(due.StoreError, match="no due_jobs table"):
            ship.options(connection=conn).enqueue(1)
        engine.dispose()
    assert search_path(app.url) != bare


def test_the_wrong_sqlalchemy_object_for_the_call_is_refused(
    app: due.App, ship: due.Task, engine: Any
) -> None:
    with pytest.raises(due.ConfigurationError, match="Connection or Session"):
        ship.options(connection=engine).enqueue(1)  # an Engine: no transaction to join
    driver = ASYNC_DRIVERS["sqlite" if app.url.startswith("sqlite") else "postgres"][0]

    async def mixed_up() -> None:
        aengine = async_engine(app.url, driver)
        async with AsyncSession(aengine) as asession:
            with pytest.raises(due.ConfigurationError, match="use the async call"):
                ship.options(connection=asession).enqueue(1)
        with (
            Session(engine) as session,
            pytest.raises(due.ConfigurationError, match="call the sync form"),
        ):
            await ship.options(connection=session).aenqueue(1)
        await aengine.dispose()

    asyncio.run(mixed_up())
    assert app.jobs(limit=5) == []


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_session_in_another_time_zone_reads_times_in_utc(
    app: due.App, ship: due.Task, engine: Any
) -> None:
    with Session(engine) as session:
        session.execute(text("SET TIME ZONE 'Asia/Kathmandu'"))
        job = ship.options(connection=session, delay=60).enqueue(1)
        seen = app.get(job.id, connection=session)
        session.commit()
    assert job.run_at.utcoffset() == seen.run_at.utcoffset() == app.get(job.id).run_at.utcoffset()
    assert seen.run_at == app.get(job.id).run_at
    with psycopg.connect(app.url) as conn:  # the row holds the same instant
        (stored,) = conn.execute("SELECT run_at FROM due_jobs WHERE id = %s", [job.id]).fetchone()
    assert stored == job.run_at


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_async_session_holding_sqlite_s_write_lock_does_not_wait_for_itself(
    app: due.App, engine: Any
) -> None:
    """A limited task's first enqueue writes the app's limits on its own
    connection, which would wait for the session's own write lock: it is left
    to the workers and the app's next enqueue of its own (as with sqlite3's)."""
    slow = due.App(app.url, store_options={"busy_timeout": 1.0})
    slow.limit("mail", concurrency=2)

    @slow.task(name="mail", limits=["mail"])
    def mail(to: str) -> None: ...

    async def sign_up() -> due.Job:
        aengine = async_engine(app.url, "aiosqlite")
        async with AsyncSession(aengine) as session:
            await session.execute(text("INSERT INTO orders VALUES (1)"))  # the write lock
            job = await mail.options(connection=session).aenqueue("a@example.com")
            await session.commit()
        await aengine.dispose()
        return job

    job = asyncio.run(sign_up())
    assert present(slow, job) and orders(engine) == [1]
    assert slow.limit_overview() == []  # not written yet: that would have waited for itself
    slow.close()


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("driver", ["psycopg", *ASYNC_DRIVERS["postgres"]])
def test_a_statement_timeout_is_the_same_error_on_every_driver(
    app: due.App, ship: due.Task, engine: Any, driver: str
) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " PERFORM pg_sleep(2); RETURN NEW; END $$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER slow BEFORE INSERT ON due_jobs FOR EACH ROW EXECUTE FUNCTION slow()"
        )
    timeout = text("SET LOCAL statement_timeout = '50ms'")
    cancelled = pytest.raises(due.StoreUnavailableError, match="the statement was cancelled")
    if driver == "psycopg":
        with Session(engine) as session, cancelled:
            session.execute(timeout)
            ship.options(connection=session).enqueue(1)
        return

    async def enqueue() -> None:
        aengine = async_engine(app.url, driver)
        async with AsyncSession(aengine) as session:
            await session.execute(timeout)
            with cancelled:
                await ship.options(connection=session).aenqueue(1)
        await aengine.dispose()

    asyncio.run(enqueue())


def test_due_s_statements_go_through_sqlalchemy_and_the_database_is_asked_once(
    app: due.App, ship: due.Task, engine: Any
) -> None:
    """What the page promises: SQLAlchemy's events (and so its echo) see due's
    statements, and which database the engine is on is asked once, not per job."""
    seen: list[str] = []

    @sqlalchemy.event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        seen.append(statement)

    for order in range(3):
        with Session(engine) as session:
            ship.options(connection=session).enqueue(order)
            session.commit()
    inserts = [s for s in seen if "INSERT INTO due_jobs" in s]
    asked = [s for s in seen if "current_database()" in s or "database_list" in s]
    assert len(inserts) == 3
    assert len(asked) == 1


class AppSession(Session):  # as SQLModel's Session, Flask-SQLAlchemy's, sessionmaker(class_=...)
    pass


class AppAsyncSession(AsyncSession):  # as SQLModel's AsyncSession
    pass


def test_a_session_of_a_class_made_from_sqlalchemy_s_is_taken(
    app: due.App, ship: due.Task, engine: Any
) -> None:
    with AppSession(engine) as session:
        rolled_back = ship.options(connection=session).enqueue(1)
        session.rollback()
        job = ship.options(connection=session).enqueue(2)
        session.commit()
    assert present(app, job) and not present(app, rolled_back)


@pytest.mark.parametrize(("backend", "driver"), ASYNC_CASES)
def test_async_sessions_of_a_class_made_from_sqlalchemy_s_and_scoped_are_taken(
    app: due.App, ship: due.Task, driver: str
) -> None:
    async def enqueue() -> list[due.Job]:
        engine = async_engine(app.url, driver)
        scoped = async_scoped_session(async_sessionmaker(engine), scopefunc=asyncio.current_task)
        try:
            async with AppAsyncSession(engine) as session:
                made = [await ship.options(connection=session).aenqueue(1)]
                await session.commit()
            made.append(await ship.options(connection=scoped).aenqueue(2))
            await scoped.commit()
            return made
        finally:
            await scoped.remove()
            await engine.dispose()

    assert all(present(app, job) for job in asyncio.run(enqueue()))


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_connection_whose_search_path_finds_another_deployment_is_refused(
    app: due.App, ship: due.Task
) -> None:
    """The same database, but the engine's search_path finds another schema's
    due_jobs (another deployment's: as a URL whose `options` were dropped)."""
    with made_schema() as other:
        other_app = due.App(postgres_schema_url(other))
        other_app.migrate()
        engine = sync_engine(postgres_schema_url(other))
        try:
            refused = pytest.raises(due.ConfigurationError, match=f"in schema {other}, not")
            with engine.connect() as conn, refused:
                ship.options(connection=conn).enqueue(1)
            assert other_app.jobs(limit=5) == []
        finally:
            engine.dispose()
            other_app.close()
    assert app.jobs(limit=5) == []


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_job_committed_on_an_autocommit_connection_rings_the_workers(
    app: due.App, ship: due.Task
) -> None:
    """As on sqlite3's own connection: due committed it, so due wakes the workers
    (tests/store/test_sqlite_doorbell.py); in a transaction, the caller's commit
    is out of sight and rings nothing."""
    from due.store.sqlite.doorbell import Doorbell

    bell = Doorbell.open(path_from_url(app.url))
    assert bell is not None
    engine = sqlalchemy.create_engine(f"sqlite:///{path_from_url(app.url)}")
    try:
        with engine.connect() as conn:
            ship.options(connection=conn).enqueue(1)
            assert not bell.wait(0)  # a ring is sent before enqueue returns: none was
            conn.commit()
        with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
            ship.options(connection=conn).enqueue(2)
        assert bell.wait(5.0)
    finally:
        bell.close()
        engine.dispose()
