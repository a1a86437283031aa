"""The bulk dry runs' count statements (count_retryable_jobs,
count_cancellable_jobs): a cap past 64 bits, and each state read through its
own index, as list_jobs reads it (prepared too, on PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

import due
from due.core.records import JobFilter
from due.store.jobs import filter_params
from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from tests.helpers.reads import generic_plan, reads
from tests.store.test_bulk_actions import fail, tasks  # noqa: F401  (fixture)


def test_a_cap_past_64_bits_counts_them_all(app: due.App, tasks: dict[str, due.Task]) -> None:  # noqa: F811
    """A cap past 64 bits counts them all, as a list's limit past 64 bits lists all."""
    app.enqueue_many([tasks["mail"].request(n) for n in range(3)])
    assert app.cancel_many(dry_run=True, cap=2**63) == 3
    assert app.retry_many(dry_run=True, cap=2**64) == 0


COUNT_PARAMS: dict[str, Any] = {
    **filter_params(JobFilter()),
    "cap": 2**62,
    "now": None,
}


@pytest.mark.parametrize(
    ("query", "state"),
    [("count_retryable_jobs", "failed"), ("count_cancellable_jobs", "waiting")],
)
def test_a_count_by_state_reads_only_that_state(
    app: due.App,
    tasks: dict[str, due.Task],  # noqa: F811
    query: str,
    state: str,
) -> None:
    """The default dry run (retry_many: state="failed") on a table of queued
    jobs: list_jobs reads the failed or waiting jobs through their index
    (list_stopped_jobs), and the dry run did too (it walked list_jobs' pages);
    the count statement reads every job, so 4,000 more queued jobs cost it
    4,000 more rows (SQLite: ~26 ms per 100,000 jobs, measured)."""
    params = {**COUNT_PARAMS, "state": state, "now": 0.0 if "sqlite" in app.url else None}
    app.enqueue_many([tasks["mail"].request(n) for n in range(10)])
    fail(app, "default", lambda _: "boom")
    app.batch("piece", [(n,) for n in range(2)])
    app.enqueue_many([tasks["mail"].request(n) for n in range(200)])
    few = reads(app, query, params)
    for _ in range(4):
        app.enqueue_many([tasks["mail"].request(n) for n in range(1000)])
    many = reads(app, query, params)
    assert many < few * 3, (few, many)


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize(
    ("query", "state"),
    [
        ("count_retryable_jobs", "failed"),
        ("count_cancellable_jobs", "waiting"),
        ("count_cancellable_jobs", "running"),
    ],
)
def test_a_prepared_count_keeps_the_index_of_its_state(
    app: due.App, query: str, state: str
) -> None:
    """As test_a_prepared_listing_keeps_its_index (test_queue_figures.py) asks
    of list_stopped_jobs: psycopg prepares a statement run five times on one
    connection (the dashboard's count on every page), and the generic plan of
    `state IN (...) AND ($1 IS NULL OR state = $1)` walks the primary key."""
    backend: Any = app.store.backend
    with backend.transaction() as tx:
        plan = generic_plan(tx, POSTGRES_QUERIES[query], {**COUNT_PARAMS, "state": state})
    # The matched jobs are read in one arm per state, each under a one-time
    # filter on the state asked: the arm of that state reads an index of its
    # state, not the table (a scan, or a range of the primary key).
    lines = plan.splitlines()
    arms = [n for n, line in enumerate(lines) if "One-Time Filter" in line and f"'{state}'" in line]
    assert arms, plan
    for n in arms:
        read = lines[n + 1]
        assert "Index Scan using" in read or "Bitmap" in read, plan
        assert "due_jobs_pkey" not in read, plan
