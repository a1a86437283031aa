"""`due.testing.empty`, on every backend: every row of every table due keeps
is gone (a table added later and forgotten in `empty_tables` fails here), the
schema stays, and the app goes on working, its limits written again."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Iterator

import psycopg

import due
from due.core.records import WorkerRegistration
from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from due.store.sqlite.backend import QUERIES as SQLITE_QUERIES
from due.store.sqlite.backend import path_from_url
from due.testing import drain, empty
from tests.helpers.waiting import wait_until

SCHEMA_RECORD = "due_schema_migrations"


def row_counts(app: due.App) -> dict[str, int]:
    """Every table of due's in the app's database (its schema, on PostgreSQL): its rows."""
    if app.url.startswith("sqlite"):
        with sqlite3.connect(path_from_url(app.url)) as conn:
            names = [
                row[0]
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                if row[0].startswith("due_")
            ]
            return {
                name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0] for name in names
            }
    with psycopg.connect(app.url) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_name LIKE 'due%%'"
            )
        ]
        return {
            name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]  # type: ignore[index]
            for name in names
        }


def test_empty_leaves_every_table_as_migrate_left_it(app: due.App) -> None:
    app.limit("exports", concurrency=2)

    @app.task(name="export", queue="bulk", limits={"exports": lambda n: f"account-{n}"})
    def export(n: int) -> int:
        return n

    @app.task(name="fail", retry=due.Retry(max_attempts=1))
    def fail() -> None:
        raise RuntimeError("boom")

    export.enqueue(1)
    fail.enqueue()
    drain(app)  # figures, a failed job, a limit's key
    export.enqueue(2)  # left queued
    flow = app.workflow("month-end")
    first = flow.add(export.request(3))
    flow.add(export.request(4), after=[first])
    flow.enqueue()
    app.add_schedule("nightly", "0 2 * * *", task=export, args=(5,))
    app.trigger_schedule("nightly", by="ann")
    app.pause_queue("bulk", by="bob")
    app.store.worker_register(WorkerRegistration("web-1:1:a", "web-1", 1, {"bulk": 2}, ["export"]))
    assert app.store.lease_acquire("scheduler", "web-1:1:a", 30)
    before = row_counts(app)
    # Every table holds rows but the recycles, written only as a worker recycles.
    assert {name for name, rows in before.items() if rows} == set(before) - {"due_worker_recycles"}
    version = app.store.schema_version()

    app.store.empty()

    after = row_counts(app)
    assert set(after) == set(before)
    assert {name: rows for name, rows in after.items() if rows} == {
        SCHEMA_RECORD: before[SCHEMA_RECORD]
    }, "a table empty_tables leaves out (queries.sql: add it there, on both stores)"
    assert app.store.schema_version() == version
    assert app.limit_overview() == []

    # due.testing's empty writes the app's limits again, as its first enqueue did.
    export.enqueue(5)
    empty(app)
    assert {name: rows for name, rows in row_counts(app).items() if rows} == {
        SCHEMA_RECORD: before[SCHEMA_RECORD],
        "due_limits": 1,
    }
    assert [overview.name for overview in app.limit_overview()] == ["exports"]
    job = export.enqueue(6)
    assert drain(app).succeeded == [job.id]
    assert app.jobs() == [app.get(job.id)]


def test_empty_tables_names_every_table_of_the_schema(app: due.App) -> None:
    """Every table migrate makes, whether or not the test above fills it (it
    leaves due_worker_recycles empty, so could not see it forgotten)."""
    queries = SQLITE_QUERIES if app.url.startswith("sqlite") else POSTGRES_QUERIES
    named = set(re.findall(r"\bdue_\w+", queries["empty_tables"]))
    assert named == set(row_counts(app)) - {SCHEMA_RECORD}


def test_empty_on_an_empty_database_does_nothing(app: due.App) -> None:
    empty(app)
    empty(app)
    assert app.jobs() == []


@contextlib.contextmanager
def reading_the_jobs(app: due.App) -> Iterator[None]:
    """A connection of the test's own in a transaction that has read due_jobs,
    rolled back at the end."""
    if app.url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(path_from_url(app.url))) as conn:
            conn.isolation_level = None
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM due_jobs").fetchone()
            yield
            conn.execute("ROLLBACK")
        return
    with psycopg.connect(app.url) as conn:
        conn.execute("SELECT count(*) FROM due_jobs").fetchone()
        yield
        conn.rollback()


def test_empty_does_not_wait_for_a_transaction_that_read_due_s_tables(app: due.App) -> None:
    """A connection left in a transaction that read the jobs (a fixture that
    rolls each test back, after the test's own enqueue(connection=...)): on
    PostgreSQL, TRUNCATE waited for its lock up to due's lock_timeout (30 s),
    every other session's reads queued behind it, then failed."""

    @app.task(name="work")
    def work() -> None: ...

    work.enqueue()
    emptied = threading.Event()
    thread = threading.Thread(target=lambda: (empty(app), emptied.set()))
    with reading_the_jobs(app):
        thread.start()
        wait_until(emptied.is_set, timeout=10, what="empty, beside a reading transaction")
    thread.join()
    assert app.jobs() == []
