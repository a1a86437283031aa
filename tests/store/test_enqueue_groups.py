"""One-job async enqueues made side by side on one event loop: those that come
while the loop's statement runs wait for it, and are written together in the
next one (store/enqueue_groups.py), each caller given its own job.

The scenarios make the crowd certain rather than likely: another session
locks the table, so the loop's statement waits on the server while the other
coroutines enqueue; then the lock goes."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta

import psycopg
import pytest

import due
from due.errors import StoreError
from due.store.sqlite.backend import path_from_url
from tests.helpers.database import rows
from tests.helpers.waiting import wait_until
from tests.store.test_loop_connections import (
    an_insert_waits_for_a_lock,
    make_app,
    run_counting,
    stored,
)

CROWD = 50


def created_at_by_argument(url: str) -> dict[int, object]:
    found = rows(url, "SELECT payload->'args'->>0, created_at FROM due_jobs")
    return {int(n): created_at for n, created_at in found}


async def hold_the_loops_statement(
    t: due.Task[..., None], locker: psycopg.Connection[object]
) -> asyncio.Task[due.Job]:
    """The loop's connection opened, then its next statement waiting for the lock."""
    await t.aenqueue(0)  # on a thread: the loop's first
    await t.aenqueue(1)  # opens the loop's connection
    locker.execute("LOCK TABLE due_jobs IN SHARE MODE")  # inserts wait for it
    held = asyncio.create_task(t.aenqueue(2))
    await asyncio.to_thread(wait_until, an_insert_waits_for_a_lock, 10)
    return held


async def five_and_one(
    t: due.Task[..., None], other: due.Task[..., None], locker: psycopg.Connection[object]
) -> list[due.Job | BaseException]:
    """A group of six behind the held statement: t(10..14), and other(99) third."""
    held = await hold_the_loops_statement(t, locker)
    crowd = [asyncio.create_task(t.aenqueue(n)) for n in range(10, 15)]
    crowd.insert(2, asyncio.create_task(other.aenqueue(99)))
    await asyncio.sleep(0)  # each has joined the group
    locker.rollback()
    await held
    return list(await asyncio.gather(*crowd, return_exceptions=True))


def test_enqueues_that_wait_for_the_loops_statement_are_written_in_one_after_it(
    postgres_url: str,
) -> None:
    app, t = make_app(postgres_url)
    locker = psycopg.connect(postgres_url)

    async def scenario() -> tuple[due.Job, list[due.Job]]:
        held = await hold_the_loops_statement(t, locker)
        crowd = [
            asyncio.create_task(t.options(delay=60 if n % 2 else 0).aenqueue(n))
            for n in range(10, 10 + CROWD)
        ]
        await asyncio.sleep(0)  # each has joined the group
        locker.rollback()
        return await held, list(await asyncio.gather(*crowd))

    try:
        (held, crowd), threads = run_counting(scenario)
        assert threads == 2, "the loop's first enqueue and the test's wait: none of the crowd"
        assert held.args == (2,)
        assert stored(postgres_url) == [0, 1, 2, *range(10, 10 + CROWD)]
        created = created_at_by_argument(postgres_url)
        assert len({created[n] for n in range(10, 10 + CROWD)}) == 1, "one statement"
        assert created[2] != created[10], "the held statement wrote its job alone"
        assert [job.args for job in crowd] == [(n,) for n in range(10, 10 + CROWD)]
        for job in crowd:  # each caller's handle is its own row, as stored
            stored_job = app.get(job.id)
            assert (stored_job.args, stored_job.run_at, stored_job.created_at) == (
                job.args,
                job.run_at,
                job.created_at,
            )
            assert job.run_at - job.created_at == timedelta(seconds=60 if job.args[0] % 2 else 0)
        assert len({job.id for job in crowd}) == CROWD
    finally:
        locker.close()
        app.close()


def test_a_request_the_server_refuses_in_a_group_fails_only_its_own_caller(
    postgres_url: str,
) -> None:
    """The group's statement writes nothing; each request is then made alone."""
    app, t = make_app(postgres_url)
    refused = app.task(name="refused")(lambda n: None)
    locker = psycopg.connect(postgres_url, autocommit=True)
    locker.execute("ALTER TABLE due_jobs ADD CONSTRAINT no_refused CHECK (task <> 'refused')")
    locker.autocommit = False

    try:
        outcomes, threads = run_counting(lambda: five_and_one(t, refused, locker))
        error = outcomes.pop(2)
        assert isinstance(error, StoreError) and "no_refused" in str(error)
        assert [job.args for job in outcomes if isinstance(job, due.Job)] == [
            (n,) for n in range(10, 15)
        ]
        assert stored(postgres_url) == [0, 1, 2, *range(10, 15)]
        assert threads == 2 + 6, "each request of the refused group made alone"
    finally:
        locker.close()
        app.close()


def test_an_error_met_after_the_commit_goes_to_every_caller_and_nothing_is_sent_again(
    postgres_url: str,
) -> None:
    """The group committed, then its reply could not be read (a trigger of the
    user's moved one job's due time past what Python's datetime holds): every
    caller gets the error, and no job is created a second time."""
    app, t = make_app(postgres_url)
    far = app.task(name="far")(lambda n: None)
    locker = psycopg.connect(postgres_url, autocommit=True)
    locker.execute(
        "CREATE FUNCTION far_off() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " NEW.run_at := '20000-01-01 00:00+00'; RETURN NEW; END $$;"
        " CREATE TRIGGER far_off BEFORE INSERT ON due_jobs FOR EACH ROW"
        " WHEN (NEW.task = 'far') EXECUTE FUNCTION far_off()"
    )
    locker.autocommit = False

    try:
        outcomes, threads = run_counting(lambda: five_and_one(t, far, locker))
        assert all(isinstance(outcome, StoreError) for outcome in outcomes), outcomes
        assert "year" in str(outcomes[2]), outcomes[2]
        assert stored(postgres_url) == [0, 1, 2, *range(10, 15), 99], "each once"
        assert threads == 2
    finally:
        locker.close()
        app.close()


def test_a_caller_cancelled_while_it_waits_for_the_group_creates_nothing(
    postgres_url: str,
) -> None:
    app, t = make_app(postgres_url)
    locker = psycopg.connect(postgres_url)

    async def scenario() -> None:
        held = await hold_the_loops_statement(t, locker)
        gone = asyncio.create_task(t.aenqueue(98))
        stays = asyncio.create_task(t.aenqueue(10))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        locker.rollback()
        await held
        await stays
        assert (await t.aenqueue(11)).args == (11,)  # the loop's connection again

    try:
        _, threads = run_counting(scenario)
        assert stored(postgres_url) == [0, 1, 2, 10, 11]
        assert threads == 2
    finally:
        locker.close()
        app.close()


# SQLite writes one transaction at a time: a group is one transaction on a
# thread, one commit (and one fsync) for all. Another connection's write lock
# holds the loop's write while the crowd comes.


def sqlite_locker(url: str) -> sqlite3.Connection:
    return sqlite3.connect(path_from_url(url), isolation_level=None)


async def hold_the_loops_write(
    t: due.Task[..., None], locker: sqlite3.Connection
) -> asyncio.Task[due.Job]:
    locker.execute("BEGIN IMMEDIATE")  # the loop's write waits for it
    held = asyncio.create_task(t.aenqueue(0))
    await asyncio.sleep(0)  # it has begun its write: the group is writing
    return held


def test_on_sqlite_enqueues_that_wait_for_the_loops_write_are_one_transaction(
    sqlite_url: str,
) -> None:
    app, t = make_app(sqlite_url)
    locker = sqlite_locker(sqlite_url)

    async def scenario() -> tuple[due.Job, list[due.Job]]:
        held = await hold_the_loops_write(t, locker)
        crowd = [
            asyncio.create_task(t.options(delay=60 if n % 2 else 0).aenqueue(n))
            for n in range(10, 10 + CROWD)
        ]
        await asyncio.sleep(0)
        locker.execute("ROLLBACK")
        return await held, list(await asyncio.gather(*crowd))

    try:
        (held, crowd), threads = run_counting(scenario)
        assert threads == 2, "one for the held write, one for the whole crowd"
        assert held.args == (0,)
        assert [job.args for job in crowd] == [(n,) for n in range(10, 10 + CROWD)]
        assert sorted(job.args[0] for job in app.jobs(limit=1000)) == [0, *range(10, 10 + CROWD)]
        assert len({job.created_at for job in crowd}) == 1, "one transaction"
        assert held.created_at != crowd[0].created_at, "the held write was its own"
        for job in crowd:  # each caller's handle is its own row, as stored
            stored_job = app.get(job.id)
            assert (stored_job.args, stored_job.run_at, stored_job.created_at) == (
                job.args,
                job.run_at,
                job.created_at,
            )
            assert job.run_at - job.created_at == timedelta(seconds=60 if job.args[0] % 2 else 0)
            assert job.run_at.utcoffset() == timedelta(0)
    finally:
        locker.close()
        app.close()


def test_on_sqlite_a_request_refused_in_a_group_fails_only_its_own_caller(
    sqlite_url: str,
) -> None:
    app, t = make_app(sqlite_url)
    refused = app.task(name="refused")(lambda n: None)
    locker = sqlite_locker(sqlite_url)
    locker.execute(  # ROLLBACK: SQLite ends the transaction itself, and says why
        "CREATE TRIGGER refuse BEFORE INSERT ON due_jobs WHEN NEW.task = 'refused'"
        " BEGIN SELECT RAISE(ROLLBACK, 'no_refused'); END"
    )

    async def scenario() -> list[due.Job | BaseException]:
        held = await hold_the_loops_write(t, locker)
        crowd = [asyncio.create_task(t.aenqueue(n)) for n in range(10, 15)]
        crowd.insert(2, asyncio.create_task(refused.aenqueue(99)))
        await asyncio.sleep(0)
        locker.execute("ROLLBACK")
        await held
        return list(await asyncio.gather(*crowd, return_exceptions=True))

    try:
        outcomes, threads = run_counting(scenario)
        error = outcomes.pop(2)
        assert isinstance(error, StoreError) and "no_refused" in str(error)
        assert [job.args for job in outcomes if isinstance(job, due.Job)] == [
            (n,) for n in range(10, 15)
        ]
        assert sorted(job.args[0] for job in app.jobs()) == [0, *range(10, 15)]
        assert threads == 2 + 6, "each request of the refused group made alone"
    finally:
        locker.close()
        app.close()
