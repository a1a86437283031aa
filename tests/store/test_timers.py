"""Jobs due later wait among the timers, out of the claim index: a claim costs
the same with twenty thousand of them at a higher priority as with none, a
delayed job is claimed by the first claim at its run_at, and from then on it
competes by priority with the rest."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import due
from due.clock import FakeClock
from due.core.jobs import AttemptError
from due.core.records import ClaimRequest, Completion
from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from due.store.sqlite.backend import QUERIES as SQLITE_QUERIES
from due.store.sqlite.backend import path_from_url
from due.store.work import PROMOTE_PER_CLAIM
from tests.conftest import START
from tests.helpers.database import rows

FUTURE_JOBS = 20_000
DUE_JOBS = 2_000


@pytest.fixture
def work(app: due.App) -> due.Task:
    @app.task(name="work")
    def work(n: int = 0) -> None: ...

    return work


def claim(app: due.App, limit: int = 1) -> list[int]:
    return [job.id for job in app.store.job_claim(ClaimRequest("default", limit, "w", 30))]


def timers(url: str) -> dict[int, bool]:
    return {
        job_id: bool(timer)
        for job_id, timer in rows(url, "SELECT id, timer FROM due_jobs WHERE state = 'queued'")
    }


def test_a_delayed_job_waits_among_the_timers_until_a_claim_takes_it(
    app: due.App, work: due.Task, clock: FakeClock, backend_url: str
) -> None:
    later = work.options(delay=60).enqueue(1)
    now = work.enqueue(2)
    assert timers(backend_url) == {later.id: True, now.id: False}
    assert claim(app, 10) == [now.id]
    assert app.store.job_next_due("default", ["work"]) == START + timedelta(seconds=60)

    clock.advance(60)
    assert claim(app, 10) == [later.id]


def test_a_due_timer_competes_by_priority_in_the_first_claim_that_sees_it(
    app: due.App, work: due.Task, clock: FakeClock, backend_url: str
) -> None:
    low = work.enqueue(1)
    urgent = work.options(delay=10, priority=5).enqueue(2)
    clock.advance(10)
    assert claim(app) == [urgent.id]
    assert claim(app) == [low.id]


def test_due_timers_a_claim_does_not_take_join_the_claim_index(
    app: due.App, work: due.Task, clock: FakeClock, backend_url: str
) -> None:
    delayed = [work.options(delay=10).enqueue(n).id for n in range(3)]
    clock.advance(10)
    assert claim(app) == [delayed[0]]
    assert timers(backend_url) == {delayed[1]: False, delayed[2]: False}
    assert claim(app, 10) == delayed[1:]


def test_a_backlog_of_due_timers_reaches_the_claim_index_a_few_hundred_per_claim(
    app: due.App, work: due.Task, clock: FakeClock, backend_url: str
) -> None:
    app.enqueue_many([work.options(delay=10).request(n) for n in range(PROMOTE_PER_CLAIM + 20)])
    clock.advance(10)
    assert len(claim(app)) == 1
    assert sum(timers(backend_url).values()) == 20
    assert len(claim(app, 1000)) == PROMOTE_PER_CLAIM + 19


def test_a_retry_after_a_backoff_waits_among_the_timers(
    app: due.App, work: due.Task, clock: FakeClock, backend_url: str
) -> None:
    job = work.enqueue(1)
    [claimed] = app.store.job_claim(ClaimRequest("default", 1, "w", 30))
    error = AttemptError(1, "boom", None, START)
    app.store.job_complete(
        [Completion(job.id, claimed.lease_token, due.JobState.QUEUED, error=error, retry_in=30)]
    )
    assert timers(backend_url) == {job.id: True}
    assert claim(app) == []
    clock.advance(30)
    assert claim(app) == [job.id]


def test_a_retried_job_keeps_its_time_to_come_among_the_timers_unless_run_now(
    app: due.App, work: due.Task, clock: FakeClock, backend_url: str
) -> None:
    kept, now = work.options(delay=60).enqueue(1), work.options(delay=60).enqueue(2)
    for job in (kept, now):
        app.cancel(job.id)
    app.retry(kept.id)
    app.retry(now.id, now=True)
    assert timers(backend_url) == {kept.id: True, now.id: False}
    assert claim(app, 10) == [now.id]
    clock.advance(60)
    assert claim(app, 10) == [kept.id]


def test_jobs_due_later_cost_a_claim_nothing(
    app: due.App, work: due.Task, backend: str, backend_url: str
) -> None:
    """Twenty thousand jobs due next week at a higher priority than the two
    thousand due now: the claim reads what it read without them (counted as
    SQLite virtual machine steps or PostgreSQL buffer reads, not timed). In the
    claim index, every claim walked past all of them (or, on PostgreSQL, read
    and sorted every job due now instead)."""
    due_now = [job.id for job in app.enqueue_many([work.request(n) for n in range(DUE_JOBS)])]
    alone = claim_cost(backend, backend_url)
    next_week = work.options(delay=7 * 86400, priority=10)
    app.enqueue_many([next_week.request(n) for n in range(FUTURE_JOBS)])
    with_timers = claim_cost(backend, backend_url)
    # Measured: SQLite 305 steps alone, 305 with the timers, 12,305 with them in
    # the claim index; PostgreSQL 129, 156 and 353 buffers.
    assert with_timers <= 1.5 * alone + 20, (alone, with_timers)
    assert claim(app, 10) == due_now[:10]


def claim_cost(backend: str, url: str) -> int:
    """The work of one claim of ten jobs, rolled back."""
    params: dict[str, Any] = {
        "queue": "default",
        "limit": 10,
        "promote": PROMOTE_PER_CLAIM,
        "worker": "w",
        "lease": 30.0,
        "leases": "{}",
        "tasks": None,
    }
    if backend == "sqlite":
        conn = sqlite3.connect(path_from_url(url), isolation_level=None)
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        try:
            conn.execute("ANALYZE")
            conn.execute("BEGIN")
            conn.set_progress_handler(count, 10)
            params["now"] = START.timestamp()
            conn.execute(SQLITE_QUERIES["promote_timers"], params)
            conn.execute(SQLITE_QUERIES["claim_jobs"], params).fetchall()
            conn.set_progress_handler(None, 0)
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        return steps
    with psycopg.connect(url) as pg:
        pg.execute("ANALYZE due_jobs")
        params["now"] = START
        [[plan]] = pg.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + POSTGRES_QUERIES["claim_jobs"], params
        ).fetchall()
        pg.rollback()
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"] + top["Shared Read Blocks"])
