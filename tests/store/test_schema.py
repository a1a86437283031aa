"""Migrations, refusal of unknown schemas, and claims that use the partial index."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator

import psycopg
import pytest

import due
from due.store.postgres import backend as postgres_backend
from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from due.store.sqlite import backend as sqlite_backend
from due.store.sqlite.backend import QUERIES as SQLITE_QUERIES
from due.store.sqlite.backend import path_from_url
from tests.conftest import made_database, postgres_schema_url


def latest_version(url: str) -> int:
    """Each backend numbers its own migrations (a change one of them needs alone
    is a migration of that one)."""
    backend = sqlite_backend if url.startswith("sqlite") else postgres_backend
    return backend.LATEST_VERSION


def test_an_unmigrated_database_is_refused_with_the_fix(backend_url: str) -> None:
    app = due.App(backend_url)

    @app.task(name="t")
    def t() -> None: ...

    try:
        with pytest.raises(due.NotMigratedError, match="`due migrate`"):
            t.enqueue()
        assert app.migrate() == list(range(1, latest_version(backend_url) + 1))
        assert t.enqueue().id > 0
    finally:
        app.close()


def test_open_checks_the_schema_at_once(backend_url: str) -> None:
    """A web app's start-up fails on a database it cannot use (not its first request)."""
    app = due.App(backend_url)
    try:
        with pytest.raises(due.NotMigratedError, match="`due migrate`"):
            app.open()
        app.migrate()
        app.open()
        app.close()
        app.open()  # again after a close, as on first use
        assert app.jobs() == []
    finally:
        app.close()


def test_migrate_is_idempotent(app: due.App) -> None:
    assert app.migrate() == []
    assert app.store.schema_version() == latest_version(app.url)


def test_a_newer_schema_is_refused(app: due.App, backend_url: str) -> None:
    app.store.job_enqueue  # noqa: B018 - opens the store
    if backend_url.startswith("sqlite"):
        with sqlite3.connect(path_from_url(backend_url)) as conn:
            conn.execute("INSERT INTO due_schema_migrations VALUES (99, 'future', 0)")
    else:
        with psycopg.connect(backend_url) as conn:
            conn.execute("INSERT INTO due_schema_migrations VALUES (99, 'future')")
    later = due.App(backend_url)
    try:
        with pytest.raises(due.SchemaTooNewError, match=r"version 99.*upgrade due"):
            later.jobs()
        with pytest.raises(due.SchemaTooNewError):
            later.migrate()
    finally:
        later.close()


def test_both_backends_name_the_same_queries() -> None:
    """The store's operations are written once: every statement they run exists
    in both backends, except those asked only of a database that locks rows
    (`Transaction.locks_rows`) and those of the PostgreSQL backend's own plumbing."""
    locking_only = {
        "lock_schedule_sync",
        "lock_parents",
        "lock_parents_skip_locked",
        "bound_rescue_locks",
        "bound_lock_wait",
        "heartbeat_waiting",
    }
    postgres_plumbing = {
        "lock_migrations",
        "current_time",
        "bound_leader_transaction",
        "bound_transaction",
        "unbounded_transaction",
        "job_table_health",  # dead row versions: PostgreSQL's alone
        "vacuum_jobs",
        "channel_names",  # SQLite has no channels: its feeds watch PRAGMA data_version
        "insert_grouped_jobs",  # enqueues side by side on an event loop's connection
        "server_identity",  # which database a caller's connection is on (SQLite: its file)
        "insert_job_unwoken",  # a single enqueue's wake-up apart from its commit
        "wake_inserted_job",  # (postgres/woken_apart.py)
    }
    # PostgreSQL moves and deletes in one statement; its claim promotes timers itself
    single_writer_only = {"drop_stats", "promote_timers"}
    expected = set(POSTGRES_QUERIES) - locking_only - postgres_plumbing | single_writer_only
    assert set(SQLITE_QUERIES) == expected


def test_sqlite_rings_after_the_statements_that_notify_on_postgres() -> None:
    """A job made claimable wakes the workers on either store: on PostgreSQL its
    statement sends a NOTIFY on the jobs channel, on SQLite its commit rings the
    doorbell (a cancel's NOTIFY has no SQLite counterpart: the heartbeat says it)."""
    jobs_channel = re.compile(r"pg_notify\(\{channel:due_jobs\},(?!\s*'!cancel)")
    notifying = {
        name for name, text in postgres_backend._RAW_QUERIES.items() if jobs_channel.search(text)
    }
    assert notifying & set(SQLITE_QUERIES) == sqlite_backend.RINGING
    # PostgreSQL's own: thread groups' inserts, and a single enqueue's wake-up sent
    # after its commit (woken_apart.py)
    assert notifying - set(SQLITE_QUERIES) == {"insert_grouped_jobs", "wake_inserted_job"}


def test_sqlite_claim_uses_the_partial_claim_index(sqlite_url: str) -> None:
    app = due.App(sqlite_url)
    app.migrate()
    app.close()
    with sqlite3.connect(path_from_url(sqlite_url)) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + SQLITE_QUERIES["claim_jobs"],
            {
                "queue": "q",
                "limit": 10,
                "worker": "w",
                "lease": 10.0,
                "leases": "{}",
                "tasks": None,
                "now": 0.0,
            },
        ).fetchall()
    details = " | ".join(row[3] for row in plan)
    assert "USING INDEX due_jobs_claim" in details, details
    assert "SCAN due_jobs" not in details.replace("SCAN due_jobs USING", ""), details


def test_postgres_claim_can_use_the_partial_claim_index(postgres_url: str) -> None:
    app = due.App(postgres_url)
    app.migrate()
    app.close()
    with psycopg.connect(postgres_url) as conn:
        conn.execute("SET enable_seqscan = off")
        params = {
            "queue": "q",
            "limit": 10,
            "promote": 500,
            "worker": "w",
            "lease": 10.0,
            "leases": "{}",
            "tasks": None,
            "now": None,
        }
        plan = "\n".join(
            row[0] for row in conn.execute("EXPLAIN " + POSTGRES_QUERIES["claim_jobs"], params)
        )
    assert "due_jobs_claim" in plan, plan
    assert "due_jobs_timers" in plan, plan


@pytest.mark.parametrize(
    ("query", "index"),
    [("due_queues", "due_jobs_claim"), ("unknown_task_candidates", "due_jobs_claim")],
)
def test_sqlite_maintenance_queries_use_an_index_of_queued_jobs(
    sqlite_url: str, query: str, index: str
) -> None:
    app = due.App(sqlite_url)
    app.migrate()
    app.close()
    params = {
        "queue": "q",
        "tasks": '["t"]',
        "grace": 60.0,
        "scan": 100,
        "after_priority": None,
        "after_run_at": None,
        "after_id": None,
        "now": 0.0,
        "now_iso": "",
    }
    with sqlite3.connect(path_from_url(sqlite_url)) as conn:
        plan = conn.execute("EXPLAIN QUERY PLAN " + SQLITE_QUERIES[query], params).fetchall()
    details = " | ".join(row[3] for row in plan)
    assert index in details, details
    assert "SCAN due_jobs" not in details.replace("SCAN due_jobs USING", ""), details


@pytest.mark.parametrize("query", ["due_queues", "unknown_task_candidates"])
def test_postgres_maintenance_queries_use_an_index_of_active_jobs_only(
    postgres_url: str, query: str
) -> None:
    app = due.App(postgres_url)
    app.migrate()
    app.close()
    params = {
        "queue": "q",
        "tasks": ["t"],
        "grace": 60.0,
        "scan": 100,
        "after_priority": None,
        "after_run_at": None,
        "after_id": None,
        "now": None,
    }
    with psycopg.connect(postgres_url) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            row[0] for row in conn.execute("EXPLAIN " + POSTGRES_QUERIES[query], params)
        )
    # Either partial index leaves the finished jobs, most of the table, unread.
    assert "due_jobs_claim" in plan or "due_jobs_backlog" in plan, plan


def test_sqlite_statements_name_a_state_before_the_partial_index_terms() -> None:
    """The header of sqlite/queries.sql says why: of two terms that seem as good,
    SQLite searches the index by the first, and searched by `state IN (...)` it
    read every queued job of a queue to count its running ones. Checked over
    every statement, so a new one cannot bring the old order back."""
    in_first = re.compile(r"\bstate IN \([^)]*\)\s+AND\s+state = ", re.IGNORECASE)
    wrong = [name for name, text in SQLITE_QUERIES.items() if in_first.search(text)]
    assert wrong == [], wrong


@pytest.fixture
def lock_database() -> Iterator[str]:
    """A database of its own, with schemas `mine` and `neighbour`: advisory locks
    are per database, and these tests take the bare names, which every
    migration and schedule sync of every other test run in due_test takes
    shared, exclusively (as public, or an earlier version, does): they would
    make those wait, and one of those waiting would lock these out."""
    with made_database() as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA mine")
            conn.execute("CREATE SCHEMA neighbour")
        yield url


@pytest.mark.parametrize("lock", ["lock_migrations", "lock_schedule_sync"])
def test_postgres_schema_locks_are_per_schema_and_wait_for_earlier_versions(
    lock: str, lock_database: str
) -> None:
    """Advisory locks are per database: a migration or a schedule sync waits for
    one in its own schema only, and for one of an earlier version, which locks
    the bare name (a rolling upgrade); in public the key is that bare name."""
    bare = {"lock_migrations": "due_schema_migrations", "lock_schedule_sync": "due_schedule_sync"}

    def in_schema(schema: str) -> str:
        return postgres_schema_url(schema, base=lock_database)

    def locked_out(schema: str) -> bool:
        with psycopg.connect(in_schema(schema)) as conn:
            conn.execute("SET lock_timeout = '100ms'")
            try:
                conn.execute(POSTGRES_QUERIES[lock])
            except psycopg.errors.LockNotAvailable:
                return True
            return False

    mine, neighbour = "mine", "neighbour"
    with psycopg.connect(in_schema(mine)) as holder:
        holder.execute(POSTGRES_QUERIES[lock])  # held until the block ends
        assert locked_out(mine)
        assert not locked_out(neighbour)
        assert locked_out("public")  # public's is the bare name, held shared here
    with psycopg.connect(in_schema("public")) as holder:
        holder.execute(POSTGRES_QUERIES[lock])
        assert locked_out("public")
        assert locked_out(mine)
    with psycopg.connect(in_schema(mine)) as earlier_version:
        earlier_version.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [bare[lock]])
        assert locked_out(mine)
        assert locked_out(neighbour)


@pytest.mark.parametrize("lock", ["lock_migrations", "lock_schedule_sync"])
def test_postgres_a_session_with_no_schema_locks_as_public_does(
    lock: str, lock_database: str
) -> None:
    """A search path that names no existing schema: the one key, exclusive, not
    shared then exclusive (two such sessions would deadlock)."""
    bare = {"lock_migrations": "due_schema_migrations", "lock_schedule_sync": "due_schedule_sync"}
    with psycopg.connect(postgres_schema_url("t_no_such_schema", base=lock_database)) as conn:
        assert conn.execute("SELECT current_schema()").fetchone() == (None,)
        conn.execute(POSTGRES_QUERIES[lock])
        held = conn.execute(
            "SELECT mode, objid FROM pg_locks WHERE locktype = 'advisory' "
            "AND pid = pg_backend_pid()"
        ).fetchall()
        (key,) = conn.execute("SELECT hashtext(%s)::oid", [bare[lock]]).fetchone()
    assert held == [("ExclusiveLock", key)]
