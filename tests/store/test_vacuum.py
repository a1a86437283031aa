"""The job table is vacuumed when its dead row versions pile up, whether or not
the server's autovacuum runs (this test's server runs with it off)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

import due
from due.clock import FakeClock
from due.core.records import ClaimRequest, Completion
from due.maintenance.vacuum import FIRST_WAIT_SECONDS, Vacuum
from due.store.jobs import VACUUM_DEAD_ROWS
from due.worker.calls import StoreCalls
from tests.helpers.database import rows

STATISTICS_SETTLE = 2.5
"""Seconds the dead-row count must stay unchanged: every session has sent its
counts by then (each sends at most once a second, when idle)."""


def dead_rows(url: str) -> int:
    # This test's table (its schema is on the search path), not another schema's.
    query = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'due_jobs'::regclass"
    [(dead,)] = rows(url, query)
    return int(dead)


def leave_dead_rows(app: due.App, url: str, backend: str) -> None:
    """Run enough jobs to leave VACUUM_DEAD_ROWS dead row versions, and wait for
    the server's statistics to count them all. Each session sends its counts at
    most once a second, in parts: a part that arrived after a vacuum put back
    the dead rows the vacuum had just cleared (the count then read 14,000)."""

    @app.task(name="work")
    def work() -> None: ...

    app.enqueue_many([work.request() for _ in range(VACUUM_DEAD_ROWS + 2_000)])
    while claimed := app.store.job_claim(ClaimRequest("default", 1000, "w", 30)):
        app.store.job_complete(
            [Completion(j.id, j.lease_token, due.JobState.SUCCEEDED, "null") for j in claimed]
        )
    if backend == "sqlite":
        return
    deadline = time.monotonic() + 30
    counted, steady_since = dead_rows(url), time.monotonic()
    while counted < VACUUM_DEAD_ROWS or time.monotonic() - steady_since < STATISTICS_SETTLE:
        assert time.monotonic() < deadline, "the statistics never counted the dead rows"
        time.sleep(0.2)
        if (now := dead_rows(url)) != counted:
            counted, steady_since = now, time.monotonic()


def test_the_job_table_is_vacuumed_when_its_dead_rows_pile_up(
    app: due.App, backend: str, backend_url: str
) -> None:
    assert app.store.job_vacuum_if_needed() is None  # nothing to clear
    leave_dead_rows(app, backend_url, backend)
    if backend == "sqlite":  # a deleted or updated row leaves nothing behind to vacuum
        assert app.store.job_vacuum_if_needed() is None
        return
    vacuumed = app.store.job_vacuum_if_needed()
    assert vacuumed is not None and vacuumed["dead"] >= VACUUM_DEAD_ROWS, vacuumed
    assert vacuumed["dead_after"] < VACUUM_DEAD_ROWS
    assert dead_rows(backend_url) < VACUUM_DEAD_ROWS
    assert app.store.job_vacuum_if_needed() is None


@pytest.mark.parametrize("backend", ["postgres"])  # the vacuum is PostgreSQL's alone
def test_a_vacuum_an_old_snapshot_holds_back_waits_longer_each_time(
    app: due.App, postgres_url: str, clock: FakeClock
) -> None:
    calls = StoreCalls(1, "vacuum")
    with psycopg.connect(postgres_url) as reader:
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM due_jobs").fetchone()  # its snapshot is taken
        leave_dead_rows(app, postgres_url, "postgres")
        vacuum = Vacuum(store=app.store, call=calls, leading=lambda: True, clock=clock)
        assert asyncio.run(vacuum.run_once())  # it ran, and cleared nothing
        assert dead_rows(postgres_url) >= VACUUM_DEAD_ROWS
        assert asyncio.run(vacuum.run_once())  # once may be lagging statistics: again
        assert not asyncio.run(vacuum.run_once())  # twice in a row: it waits
        clock.advance(FIRST_WAIT_SECONDS)
        assert asyncio.run(vacuum.run_once())
        clock.advance(FIRST_WAIT_SECONDS)
        assert not asyncio.run(vacuum.run_once())  # twice as long now
        reader.rollback()
    clock.advance(FIRST_WAIT_SECONDS)
    assert asyncio.run(vacuum.run_once())  # the snapshot is gone: cleared
    assert dead_rows(postgres_url) < VACUUM_DEAD_ROWS
    calls.close()


@pytest.mark.parametrize("backend", ["postgres"])
def test_the_vacuum_runs_without_the_sessions_statement_limit(app: due.App) -> None:
    backend: Any = app.store.backend
    with backend.transaction(single=True, unbounded=True) as tx:
        tx.cursor.execute("SHOW statement_timeout")
        assert tx.cursor.fetchone()["statement_timeout"] == "0"
    with backend.transaction(single=True) as tx:  # set back for every other statement
        tx.cursor.execute("SHOW statement_timeout")
        assert tx.cursor.fetchone()["statement_timeout"] == "1min"
