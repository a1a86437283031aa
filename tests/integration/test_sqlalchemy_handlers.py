"""A handler's own SQLAlchemy session: checkpoints in its transaction, and the job's
success committed with its writes (`ctx.transaction(session)`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

import due
from due import JobState
from due.store.sqlite.backend import path_from_url
from due.testing import drain
from tests.helpers.sqlalchemy_engines import ASYNC_DRIVERS, async_engine, sync_engine


class Refused(Exception):
    pass


@pytest.fixture
def engine(app: due.App) -> Iterator[Any]:
    engine = sync_engine(app.url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE ledger (job integer, amount integer)")
    yield engine
    engine.dispose()


def ledger(engine: Any) -> list[tuple[int, int]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT job, amount FROM ledger ORDER BY job")
        return [tuple(row) for row in rows]


def async_driver(app: due.App) -> str:
    return ASYNC_DRIVERS["sqlite" if app.url.startswith("sqlite") else "postgres"][0]


def test_the_job_succeeds_in_the_handler_s_session(app: due.App, engine: Any) -> None:
    @app.task(name="post", retry=due.Retry(max_attempts=1))
    def post(ctx: due.Context, amount: int) -> None:
        with Session(engine) as session, ctx.transaction(session):
            session.execute(
                text("INSERT INTO ledger VALUES (:job, :amount)"),
                {"job": ctx.job_id, "amount": amount},
            )
            if amount < 0:
                raise Refused("no refunds here")

    paid, refused = post.enqueue(30), post.enqueue(-5)
    drain(app)
    assert app.get(paid.id).state == JobState.SUCCEEDED
    assert app.get(refused.id).state == JobState.FAILED
    assert ledger(engine) == [(paid.id, 30)]  # the failed block's row was rolled back


def test_the_job_succeeds_in_the_handler_s_async_session(app: due.App, engine: Any) -> None:
    driver = async_driver(app)

    @app.task(name="post", retry=due.Retry(max_attempts=1))
    async def post(ctx: due.Context, amount: int) -> None:
        aengine = async_engine(app.url, driver)
        try:
            async with AsyncSession(aengine) as session, ctx.transaction(session):
                await session.execute(
                    text("INSERT INTO ledger VALUES (:job, :amount)"),
                    {"job": ctx.job_id, "amount": amount},
                )
                if amount < 0:
                    raise Refused("no refunds here")
        finally:
            await aengine.dispose()

    paid, refused = post.enqueue(30), post.enqueue(-5)
    drain(app)
    assert app.get(paid.id).state == JobState.SUCCEEDED
    assert app.get(refused.id).state == JobState.FAILED
    assert ledger(engine) == [(paid.id, 30)]


def test_a_job_asked_to_stop_commits_nothing_of_its_transaction(app: due.App, engine: Any) -> None:
    @app.task(name="post")
    def post(ctx: due.Context, amount: int) -> None:
        with Session(engine) as session, ctx.transaction(session):
            app.cancel(ctx.job_id)  # asked to stop while the block runs (before its
            # write: on SQLite the block's transaction would hold the one write lock)
            session.execute(text(f"INSERT INTO ledger VALUES ({ctx.job_id}, {amount})"))

    job = post.enqueue(30)
    drain(app)
    assert app.get(job.id).state == JobState.CANCELLED
    assert ledger(engine) == []


def test_checkpoints_in_the_handler_s_sessions(app: due.App, engine: Any) -> None:
    driver = async_driver(app)

    @app.task(name="copy")
    def copy(ctx: due.Context) -> None:
        with Session(engine) as session:
            session.execute(text(f"INSERT INTO ledger VALUES ({ctx.job_id}, 1)"))
            ctx.checkpoint("rolled back", connection=session)
            session.rollback()
        with Session(engine) as session:
            session.execute(text(f"INSERT INTO ledger VALUES ({ctx.job_id}, 2)"))
            ctx.checkpoint("sync", connection=session)
            session.commit()

    @app.task(name="acopy")
    async def acopy(ctx: due.Context) -> None:
        aengine = async_engine(app.url, driver)
        async with AsyncSession(aengine) as session:
            await session.execute(text(f"INSERT INTO ledger VALUES ({ctx.job_id}, 3)"))
            await ctx.checkpoint("async", connection=session)
            await session.commit()
        await aengine.dispose()

    synced, asynced = copy.enqueue(), acopy.enqueue()
    drain(app)
    assert app.get(synced.id).checkpoint == "sync"
    assert app.get(asynced.id).checkpoint == "async"
    assert ledger(engine) == [(synced.id, 2), (asynced.id, 3)]


def test_the_wrong_form_of_transaction_is_refused(app: due.App, engine: Any) -> None:
    refusals: list[str] = []

    @app.task(name="mixed")
    async def mixed(ctx: due.Context) -> None:
        with Session(engine) as session:
            try:
                async with ctx.transaction(session):
                    pass
            except due.ConfigurationError as error:
                refusals.append(str(error))

    mixed.enqueue()
    drain(app)
    assert refusals and "AsyncConnection or AsyncSession" in refusals[0]


def test_a_connection_in_autocommit_is_refused_before_the_block_writes(
    app: due.App, engine: Any
) -> None:
    """Each statement would commit on its own: the block's rows would stay
    whatever became of the job, and a retry would write them again."""
    refusals: list[str] = []
    driver = async_driver(app)

    def raw_autocommit() -> Any:
        if app.url.startswith("sqlite"):
            return sqlite3.connect(path_from_url(app.url), isolation_level=None)
        return psycopg.connect(app.url, autocommit=True)

    @app.task(name="post", retry=due.Retry(max_attempts=1))
    def post(ctx: due.Context) -> None:
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        for connect in (autocommit.connect, raw_autocommit):
            with contextlib.closing(connect()) as conn:
                try:
                    with ctx.transaction(conn):
                        refusals.append("the block ran")
                except due.ConfigurationError as error:
                    refusals.append(str(error))

    @app.task(name="apost", retry=due.Retry(max_attempts=1))
    async def apost(ctx: due.Context) -> None:
        aengine = async_engine(app.url, driver, isolation_level="AUTOCOMMIT")
        async with aengine.connect() as conn:
            try:
                async with ctx.transaction(conn):
                    refusals.append("the block ran")
            except due.ConfigurationError as error:
                refusals.append(str(error))
        await aengine.dispose()

    post.enqueue(), apost.enqueue()
    drain(app)
    assert len(refusals) == 3
    assert all("in autocommit" in refusal for refusal in refusals), refusals


@pytest.mark.parametrize("backend", ["sqlite"])
def test_ctx_transaction_takes_a_session_on_sqlalchemy_s_savepoint_recipe(
    app: due.App, engine: Any
) -> None:
    """SQLAlchemy's recipe for savepoints on pysqlite (which the SQLAlchemy page
    points to): sqlite3 begins nothing itself, SQLAlchemy sends BEGIN. Such a
    session is in a transaction, not in autocommit."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def no_implicit_begin(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def explicit_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    @app.task(name="credit", retry=due.Retry(max_attempts=1))
    def credit(ctx: due.Context, amount: int) -> None:
        with (
            Session(engine) as session,
            ctx.transaction(session),
            session.begin_nested(),  # a savepoint, kept
        ):
            session.execute(
                text("INSERT INTO ledger VALUES (:job, :amount)"),
                {"job": ctx.job_id, "amount": amount},
            )

    engine.dispose()  # its pooled connections were made before the recipe
    job = credit.enqueue(5)
    drain(app)
    assert app.get(job.id).state is JobState.SUCCEEDED
    assert ledger(engine) == [(job.id, 5)]
