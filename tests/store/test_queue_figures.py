"""The queue figures (`app.queues()`, `due status`, the dashboard, /metrics) on
every backend: what each counts, and that each stops counting at its limit,
so ten million jobs scheduled ahead cost a look at the queues no more than
ten thousand do (bench/visibility_bench.py measures the time)."""

from __future__ import annotations

import re
import sqlite3
from datetime import timedelta
from typing import Any

import pytest

import due
from due.clock import FakeClock
from due.core.records import COUNT_LIMIT, COUNTED_FIGURES, ClaimRequest
from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from due.store.sqlite.backend import QUERIES, path_from_url
from due.testing import drain
from tests.conftest import START
from tests.helpers.reads import generic_plan, reads


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
    """Each count stops in the statement: capping in Python would hide one that
    reads every job."""
    for _ in range(3):
        tasks["flaky"].enqueue()  # retrying, and scheduled
        tasks["broken"].enqueue()  # failed
    drain(app)
    app.enqueue_many([tasks["ok"].request(n) for n in range(6)])
    app.store.job_claim(ClaimRequest("default", 3, "w", 30.0))  # 3 running, 3 due
    for n in range(3):
        app.batch(tasks["ok"], [(n,)])  # a waiting parent (in "default"), its piece due
    with app.store.backend.transaction(read=True) as tx:
        rows = tx.run("queue_overview", {"now": tx.now, "limit": 2})
    (row,) = [row for row in rows if row["queue"] == "default"]
    assert {figure: row[figure] for figure in COUNTED_FIGURES} == dict.fromkeys(COUNTED_FIGURES, 2)
    assert figures(app).waiting == 3  # (what the limit cut)


def test_a_queue_whose_jobs_all_run_is_shown(
    app: due.App, tasks: dict[str, due.Task[..., None]]
) -> None:
    """On PostgreSQL the running jobs are found apart from the backlog (queued,
    waiting, failed): a queue with nothing else is still one of the queues."""
    tasks["ok"].options(queue="busy").enqueue()
    app.store.job_claim(ClaimRequest("busy", 1, "w", 30.0))
    (row,) = [row for row in app.store.queue_overview() if row.name == "busy"]
    assert (row.running, row.queued, row.failed) == (1, 0, 0)


def one_kind_of_job_per_queue(
    app: due.App, tasks: dict[str, due.Task[..., None]], clock: FakeClock
) -> dict[str, tuple[int, ...]]:
    """A queue for each index SQLite finds a queue's jobs in (claimable,
    timers due or not, held pieces, waiting and failed, running), each with
    jobs of that kind only; the figures (due, scheduled, running, waiting,
    failed) each queue should show."""
    ok, broken = tasks["ok"], tasks["broken"]
    ok.options(queue="claimable").enqueue()
    ok.options(queue="timer-due", delay="1s").enqueue()
    ok.options(queue="timer-later", delay="1h").enqueue()
    pieces = [ok.options(queue="held").request(1), ok.options(queue="held-alone").request(2)]
    parent = app.batch(ok, pieces)  # the parent waits in its first piece's queue
    app.pause_group(parent.id)
    broken.options(queue="failed").enqueue()
    drain(app, queues=["failed"])
    ok.options(queue="running").enqueue()
    app.store.job_claim(ClaimRequest("running", 1, "w", 30.0))
    clock.advance(2)
    return {
        "claimable": (1, 0, 0, 0, 0),
        "timer-due": (1, 0, 0, 0, 0),
        "timer-later": (0, 1, 0, 0, 0),
        "held": (1, 0, 0, 1, 0),
        "held-alone": (1, 0, 0, 0, 0),
        "failed": (0, 0, 0, 0, 1),
        "running": (0, 0, 1, 0, 0),
    }


def shown(app: due.App) -> dict[str, tuple[int, ...]]:
    return {
        queue.name: (queue.due, queue.scheduled, queue.running, queue.waiting, queue.failed)
        for queue in app.store.queue_overview()
    }


def test_a_queue_is_counted_wherever_its_jobs_wait(
    app: due.App, tasks: dict[str, due.Task[..., None]], clock: FakeClock
) -> None:
    """A queue whose only jobs are of one kind is still listed, and counted."""
    expected = one_kind_of_job_per_queue(app, tasks, clock)
    assert shown(app) == expected
    assert app.store.queue_due_names() == ["claimable", "timer-due"]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_upgrading_to_counting_queued_jobs_in_their_own_indexes_keeps_the_figures(
    app: due.App, tasks: dict[str, due.Task[..., None]], clock: FakeClock
) -> None:
    """Migration 0011 on a table that holds jobs of every kind: back to the
    schema before it (the index of active jobs, none of the two new ones, and
    none of the later migrations), then upgraded again."""
    expected = one_kind_of_job_per_queue(app, tasks, clock)
    with sqlite3.connect(path_from_url(app.url)) as conn:
        conn.executescript(
            """
            DROP INDEX due_jobs_held;
            DROP INDEX due_jobs_parked;
            CREATE INDEX due_jobs_active ON due_jobs (queue, state, run_at, attempt, held)
                WHERE state IN ('queued', 'running', 'waiting', 'failed');
            ALTER TABLE due_jobs DROP COLUMN attempt_status;
            ALTER TABLE due_schedules DROP COLUMN problem;
            DROP TABLE due_limits;
            DROP TABLE due_limit_keys;
            DROP INDEX due_jobs_limited;
            DROP INDEX due_jobs_limit_wait;
            DROP INDEX due_jobs_limited_running;
            DROP INDEX due_jobs_limited_queue;
            DROP INDEX due_jobs_claim;
            CREATE INDEX due_jobs_claim ON due_jobs (queue, priority DESC, run_at, id)
                WHERE state = 'queued' AND NOT held AND NOT timer;
            ALTER TABLE due_jobs DROP COLUMN limits;
            ALTER TABLE due_jobs DROP COLUMN limit_wait;
            ALTER TABLE due_jobs DROP COLUMN limit_wait_key;
            ALTER TABLE due_schedules DROP COLUMN limits;
            DROP TABLE due_workflows;
            DROP TABLE due_workflow_edges;
            DROP INDEX due_jobs_step;
            ALTER TABLE due_jobs DROP COLUMN workflow_id;
            ALTER TABLE due_jobs DROP COLUMN step_name;
            ALTER TABLE due_jobs DROP COLUMN upstream_pending;
            ALTER TABLE due_jobs DROP COLUMN upstream_failed;
            ALTER TABLE due_jobs DROP COLUMN on_upstream_failure;
            DROP TABLE due_worker_recycles;
            DELETE FROM due_schema_migrations WHERE version >= 11;
            """
        )
    assert app.migrate() == [11, 12, 13, 14, 15, 16]
    assert shown(app) == expected


@pytest.mark.parametrize("backend", ["postgres"])
def test_postgres_counts_running_jobs_through_their_index(
    app: due.App, tasks: dict[str, due.Task[..., None]]
) -> None:
    """A claim leaves the index of the backlog (one index entry fewer per job):
    the running jobs of a queue are counted through due_jobs_running, never by
    reading its queued ones."""
    backend: Any = app.store.backend
    with backend.transaction() as tx:
        tx.cursor.execute("SET LOCAL enable_seqscan = off")  # an empty table, else scanned
        plan = generic_plan(tx, POSTGRES_QUERIES["queue_overview"], {"now": None, "limit": 11})
    assert "due_jobs_running" in plan and "due_jobs_backlog" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_the_default_limit_holds_through_the_app(
    app: due.App, tasks: dict[str, due.Task[..., None]]
) -> None:
    app.enqueue_many([tasks["ok"].request(n) for n in range(COUNT_LIMIT + 1)])
    (overview,) = app.queues()
    assert overview.due == COUNT_LIMIT and overview.shown("due") == f"{COUNT_LIMIT}+"


NO_NEWER_FILTERS = dict.fromkeys(
    [
        "since",
        "until",
        "error_contains",
        "key_prefix",
        "workflow",
        "args_contains",
        "hidden_positions",
    ]
)
RUNNING_ROW_SCANS = ["select_expired", "any_expired", "queue_stuck", "running_per_worker"]


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    "query",
    [*RUNNING_ROW_SCANS, "queue_overview", "list_running_jobs", "list_stopped_jobs"],
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
        **NO_NEWER_FILTERS,
    }
    with sqlite3.connect(path_from_url(app.url)) as conn:
        plan = conn.execute(f"EXPLAIN QUERY PLAN {QUERIES[query]}", params).fetchall()
    own = ("SCAN q", "SCAN (subquery", "SCAN CONSTANT ROW", "SCAN levels", "SCAN listed")
    scans = [
        row[3] for row in plan if row[3].startswith("SCAN ") and not row[3].startswith(own)
    ]  # every read of a table (any alias), not of the statement's own subqueries
    assert all("INDEX" in scan for scan in scans), plan


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_starts_a_page_of_jobs_at_its_bound(app: due.App) -> None:
    """A page a third down a table of ten million jobs starts where the page
    starts, not at the newest job."""
    params = {"now": 0.0, "limit": 51, "stuck_only": False, "before": 1000}
    params |= {"queue": None, "state": None, "task": None, "parent": None, "key": None}
    params |= NO_NEWER_FILTERS
    with sqlite3.connect(path_from_url(app.url)) as conn:
        plan = conn.execute(f"EXPLAIN QUERY PLAN {QUERIES['list_jobs']}", params).fetchall()
    assert any("rowid<" in row[3] for row in plan), plan


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("select_expired", "due_jobs_running"),
        ("any_expired", "due_jobs_running"),
        ("list_running_jobs", "due_jobs_running"),
        ("list_stopped_jobs", "due_jobs_stopped"),
    ],
)
def test_postgres_finds_running_and_failed_jobs_through_their_index(
    app: due.App, query: str, index: str
) -> None:
    params = {"now": None, "limit": 10, "queue": None, "state": "failed", "task": None}
    params |= {"parent": None, "key": None, "before": None, "stuck_only": False}
    params |= NO_NEWER_FILTERS
    backend: Any = app.store.backend
    with backend.transaction() as tx:
        tx.cursor.execute("SET LOCAL enable_seqscan = off")  # an empty table, else scanned
        tx.cursor.execute(f"EXPLAIN {POSTGRES_QUERIES[query]}", params)
        plan = "\n".join(row["QUERY PLAN"] for row in tx.cursor.fetchall())
    assert index in plan, plan


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize(
    ("query", "state", "index"),
    [
        ("list_stopped_jobs", "failed", "due_jobs_stopped"),
        ("list_stopped_jobs", "waiting", "due_jobs_stopped"),
        ("list_running_jobs", "running", "due_jobs_running"),
    ],
)
def test_a_prepared_listing_keeps_its_index(
    app: due.App, query: str, state: str, index: str
) -> None:
    """A generic plan cannot use a partial index for `state = $1`: it walked back
    through the primary key past every newer job."""
    params = {"now": None, "limit": 51, "queue": None, "state": state, "task": None}
    params |= {"parent": None, "key": None, "before": None, "stuck_only": False}
    params |= NO_NEWER_FILTERS
    backend: Any = app.store.backend
    with backend.transaction() as tx:
        plan = generic_plan(tx, POSTGRES_QUERIES[query], params)
    assert index in plan and "due_jobs_pkey" not in plan, plan


def test_the_oldest_due_job_is_the_oldest_a_worker_may_take(
    app: due.App, tasks: dict[str, due.Task[..., None]], clock: FakeClock
) -> None:
    """Held pieces (a paused group) do not count; a timer that came due does,
    at any priority."""
    parent = app.batch(tasks["ok"], [(n,) for n in range(3)])  # pieces due at START
    app.pause_group(parent.id)
    tasks["ok"].options(queue="other").enqueue(0)  # another queue's
    clock.advance(2)
    tasks["ok"].options(delay="3s").enqueue(10)  # a timer, due at START + 5 s
    tasks["ok"].options(delay="1h", priority=9).enqueue(13)  # a timer not due: not counted
    clock.advance(8)
    tasks["ok"].options(priority=5).enqueue(11)  # due at START + 10 s
    tasks["ok"].enqueue(12)
    assert figures(app).oldest_due_at == START + timedelta(seconds=5)
    claim = ClaimRequest("default", 1, "w", 30.0)
    (first,) = app.store.job_claim(claim)
    assert first.args == (11,)  # priority first: the timer stays the oldest due
    assert figures(app).oldest_due_at == START + timedelta(seconds=5)
    (second,) = app.store.job_claim(claim)
    assert second.args == (10,)
    assert figures(app).oldest_due_at == START + timedelta(seconds=10)
    app.store.job_claim(claim)
    assert figures(app).oldest_due_at is None  # only held pieces are left
    assert figures(app).due == 3


@pytest.fixture
def crowded_queue(app: due.App, tasks: dict[str, due.Task[..., None]], clock: FakeClock) -> Any:
    """A queue of `n` due jobs and `n` held pieces, with nothing running,
    waiting or failed: a look at it must read about as much whatever `n`."""

    def fill(n: int) -> None:
        clock.set(START - timedelta(hours=n))  # these held pieces are the oldest
        app.pause_group(app.batch(tasks["ok"], [(i,) for i in range(n)]).id)
        clock.advance(1)
        app.enqueue_many([tasks["ok"].request(i) for i in range(n)])
        clock.set(START)

    return fill


def test_a_look_at_a_crowded_queue_reads_as_much(app: due.App, crowded_queue: Any) -> None:
    """The oldest due job was found by reading past every held piece; on SQLite,
    searched by `state IN (...)` first, each count of running, waiting or failed
    jobs read every queued one."""

    def reads_of_a_look() -> int:
        now: Any = START + timedelta(days=1)
        if app.url.startswith("sqlite"):
            now = now.timestamp()
        return reads(app, "queue_overview", {"now": now, "limit": 11}, backlog=True)

    crowded_queue(100)
    few = reads_of_a_look()
    crowded_queue(2000)
    assert reads_of_a_look() < few * 1.5, (few, reads_of_a_look())


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_prepared_sweep_reads_on_through_the_claim_index(app: due.App) -> None:
    """Each worker runs the unknown-task look every minute: psycopg prepares it,
    and its generic plan must still read a range of the claim index."""
    params = {"queue": "q", "tasks": ["t"], "grace": 3600.0, "scan": 100, "now": None}
    params |= {"after_priority": 0, "after_run_at": START, "after_id": 5}
    backend: Any = app.store.backend
    with backend.transaction() as tx:
        tx.cursor.execute("SET LOCAL enable_seqscan = off")  # an empty table, else scanned
        plan = generic_plan(tx, POSTGRES_QUERIES["unknown_task_candidates"], params)
    assert plan.count("due_jobs_claim") == 2, plan
    assert re.search(r"Index Cond: .*ROW\(run_at, id\) >", plan), plan
