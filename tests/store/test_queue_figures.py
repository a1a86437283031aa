"""The queue figures (`app.queues()`, `due status`, the dashboard, /metrics) on
every backend: what each counts, and that each stops counting at its limit,
so ten million jobs scheduled ahead cost a look at the queues no more than
ten thousand do (bench/visibility_bench.py measures the time)."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any

import pytest

import due
from due.clock import FakeClock
from due.core.records import COUNT_LIMIT, ClaimRequest
from due.store.sqlite.backend import QUERIES, path_from_url
from due.testing import drain
from tests.conftest import START


@pytest.fixture
def tasks(app: due.App) -> dict[str, due.Task[..., None]]:
    @app.task(name="ok")
    def ok(n: int = 0) -> None: ...

    @app.task(name="flaky", retry=due.Retry(max_attempts=3, backoff=60))
    def flaky() -> None:
        raise ConnectionError("later")

    @app.task(name="broken", retry=due.Retry(max_attempts=1))
    def broken() -> None:
        raise ValueError("never")

    return {"ok": ok, "flaky": flaky, "broken": broken}


def figures(app: due.App, limit: int = COUNT_LIMIT) -> due.QueueOverview:
    (overview,) = [queue for queue in app.store.queue_overview(limit) if queue.name == "default"]
    return overview


def test_each_figure_counts_its_jobs(
    app: due.App, tasks: dict[str, due.Task[..., None]], clock: FakeClock
) -> None:
    tasks["flaky"].enqueue()  # retried in a minute: retrying and scheduled
    tasks["broken"].enqueue()  # failed for good
    drain(app)
    clock.advance(5)
    for n in range(3):
        tasks["ok"].enqueue(n)  # due
    tasks["ok"].options(delay="1h").enqueue(9)  # scheduled
    (running,) = app.store.job_claim(ClaimRequest("default", 1, "w", 30.0))
    overview = figures(app)
    assert (overview.due, overview.scheduled, overview.queued) == (2, 2, 4)
    assert (overview.running, overview.retrying, overview.failed) == (1, 1, 1)
    assert overview.oldest_due_at == START + timedelta(seconds=5)
    assert overview.at_least == frozenset() and overview.shown("queued") == "4"
    assert running.args == (0,)


def test_a_figure_past_its_limit_says_at_least(
    app: due.App, tasks: dict[str, due.Task[..., None]]
) -> None:
    app.enqueue_many([tasks["ok"].request(n) for n in range(5)])
    app.enqueue_many([tasks["ok"].options(delay="1h").request(n) for n in range(3)])
    overview = figures(app, limit=3)
    assert (overview.due, overview.scheduled, overview.queued) == (3, 3, 6)
    assert overview.at_least == {"due", "queued"}  # 3 scheduled: exactly the limit
    assert (overview.shown("due"), overview.shown("scheduled")) == ("3+", "3")
    assert overview.oldest_due_at == START  # never limited: the first entry


def test_the_statement_reads_no_further_than_the_limit(
    app: due.App, tasks: dict[str, due.Task[..., None]]
) -> None:
    """Capping in Python would hide a statement that counts every job."""
    app.enqueue_many([tasks["ok"].request(n) for n in range(9)])
    with app.store.backend.transaction(read=True) as tx:
        (row,) = tx.run("queue_overview", {"now": tx.now, "limit": 4})
    assert row["due"] == 4 and row["scheduled"] == 0


def test_the_default_limit_holds_through_the_app(
    app: due.App, tasks: dict[str, due.Task[..., None]]
) -> None:
    app.enqueue_many([tasks["ok"].request(n) for n in range(COUNT_LIMIT + 1)])
    (overview,) = app.queues()
    assert overview.due == COUNT_LIMIT and overview.shown("due") == f"{COUNT_LIMIT}+"


RUNNING_ROW_SCANS = ["select_expired", "any_expired", "queue_stuck", "running_per_worker"]


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    "query",
    [*RUNNING_ROW_SCANS, "queue_overview", "list_jobs_in_rare_state"],
)
def test_sqlite_reads_an_index_not_the_table(app: due.App, query: str) -> None:
    """SQLite uses a partial index only when the query repeats its terms: a
    missing `state IN (...)` turns the read into a scan of every job."""
    params: dict[str, Any] = {
        "now": 0.0,
        "limit": 10,
        "queue": None,
        "state": "failed",
        "task": None,
        "parent": None,
        "key": None,
        "before": None,
        "stuck_only": False,
    }
    with sqlite3.connect(path_from_url(app.url)) as conn:
        plan = conn.execute(f"EXPLAIN QUERY PLAN {QUERIES[query]}", params).fetchall()
    scans = [row[3] for row in plan if row[3].startswith("SCAN due_jobs")]
    assert all("INDEX" in scan for scan in scans), plan


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_starts_a_page_of_jobs_at_its_bound(app: due.App) -> None:
    """A page a third down a table of ten million jobs starts where the page
    starts, not at the newest job."""
    params = {"now": 0.0, "limit": 51, "stuck_only": False, "before": 1000}
    params |= {"queue": None, "state": None, "task": None, "parent": None, "key": None}
    with sqlite3.connect(path_from_url(app.url)) as conn:
        plan = conn.execute(f"EXPLAIN QUERY PLAN {QUERIES['list_jobs']}", params).fetchall()
    assert any("rowid<" in row[3] for row in plan), plan
