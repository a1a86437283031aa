"""PostgreSQL: a single enqueue's wake-up goes in a transaction of its own, after
the job's commit (postgres/woken_apart.py), so that the job's commit takes no
lock on notifications: an idle worker still hears each job, never before it is
there; an enqueue that fails wakes nobody; a wake-up that fails does not fail
an enqueue whose job is committed."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

import due
from tests.conftest import POSTGRES_BASE_URL


@pytest.fixture
def postgres_app(postgres_url: str) -> Iterator[due.App]:
    app = due.App(postgres_url)
    app.migrate()
    yield app
    app.close()


def test_an_idle_listener_hears_each_single_enqueue_after_its_job_is_there(
    postgres_app: due.App,
) -> None:
    @postgres_app.task(name="t", queue="mail")
    def t(n: int) -> None: ...

    backend = postgres_app.store.backend
    with backend.listen_connection() as listener:  # type: ignore[attr-defined]
        jobs = [t.enqueue(n) for n in range(3)]
        notes = list(listener.notifies(timeout=5, stop_after=3))
        with psycopg.connect(postgres_app.url, autocommit=True) as reader:
            for note, job in zip(notes, jobs, strict=True):
                queue, run_at = note.payload.split()
                assert queue == "mail" and float(run_at) == job.run_at.timestamp()
                # the job was committed before its wake-up was sent
                present = reader.execute("SELECT count(*) FROM due_jobs WHERE id = %s", [job.id])
                assert present.fetchone() == (1,)


def test_a_failed_single_enqueue_wakes_nobody_and_its_session_writes_on(
    postgres_app: due.App, postgres_url: str
) -> None:
    """The insert fails inside the pipeline: its transaction is ended (not left
    open on the pooled session), nothing is notified, the next enqueue works."""

    @postgres_app.task(name="t")
    def t(n: int) -> None: ...

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.payload @> '{\"args\": [13]}' THEN RAISE EXCEPTION 'refused 13'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON due_jobs FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    backend = postgres_app.store.backend
    with backend.listen_connection() as listener:  # type: ignore[attr-defined]
        for _ in range(3):  # more times than the pool has idle sessions to hide one
            with pytest.raises(due.StoreError, match="refused 13"):
                t.enqueue(13)
        assert list(listener.notifies(timeout=0.3)) == []
        job = t.enqueue(1)
        (note,) = list(listener.notifies(timeout=5, stop_after=1))
        assert note.payload.startswith("default ")
    assert [j.id for j in postgres_app.jobs()] == [job.id]


@pytest.fixture
def role_without_notify(postgres_schema: str, postgres_url: str) -> Iterator[str]:
    """A URL of a role that may write jobs and read back what an insert returns,
    but not read a job's queue, which the wake-up names: its wake-up fails."""
    role = f"r_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        grants = [
            "GRANT USAGE ON SCHEMA {schema} TO {role}",
            "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
            "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
            "GRANT INSERT ON {schema}.due_jobs TO {role}",
            "REVOKE SELECT ON {schema}.due_jobs FROM {role}",
            "GRANT SELECT (id, run_at, created_at, dedupe_key) ON {schema}.due_jobs TO {role}",
        ]
        for grant in grants:
            conn.execute(
                sql.SQL(grant).format(
                    schema=sql.Identifier(postgres_schema), role=sql.Identifier(role)
                )
            )
    try:
        yield postgres_url.replace("postgresql://", f"postgresql://{role}@", 1)
    finally:
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            for statement in ("DROP OWNED BY {}", "DROP ROLE {}"):
                conn.execute(sql.SQL(statement).format(sql.Identifier(role)))


def test_a_wake_up_that_fails_does_not_fail_the_enqueue_of_a_committed_job(
    postgres_app: due.App, role_without_notify: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the notification was part of the job's statement, and its failure
    rolled the job back. Now the job is committed first: failing the call then
    would tell the caller a job that exists was not made (and a retry would make
    it twice). Workers poll too, so the job is run without its wake-up."""
    app = due.App(role_without_notify)
    try:

        @app.task(name="t")
        def t(n: int) -> None: ...

        with caplog.at_level(logging.WARNING, logger="due.store"):
            job = t.enqueue(1)
        assert postgres_app.get(job.id).args == (1,)
        assert any("store.wakeup_failed" in record.getMessage() for record in caplog.records)
    finally:
        app.close()


def test_the_wake_up_finds_its_job_by_the_primary_key(postgres_app: due.App) -> None:
    """Not by reading the table: the sequence's value is read once (currval in
    the WHERE clause alone is volatile, read for every row)."""
    statement = postgres_app.store.backend._queries["wake_inserted_job"]  # type: ignore[attr-defined]
    with psycopg.connect(postgres_app.url, autocommit=True) as conn:
        conn.execute("SELECT nextval('due_jobs_id_seq')")
        conn.execute("SET enable_seqscan = off")  # a plan that can use the key does
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {statement}"))
    assert "Seq Scan" not in plan, plan


def test_from_an_event_loop_too(
    postgres_app: due.App, role_without_notify: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`await task.aenqueue` on the store's connection of the loop (from the
    loop's second enqueue: its first takes a thread): heard after its commit,
    and not failed by a wake-up that fails."""

    @postgres_app.task(name="t")
    def t(n: int) -> None: ...

    async def enqueue_twice(task: due.Task[..., None]) -> list[due.Job]:
        return [await task.aenqueue(1), await task.aenqueue(2)]

    backend = postgres_app.store.backend
    with backend.listen_connection() as listener:  # type: ignore[attr-defined]
        jobs = asyncio.run(enqueue_twice(t))
        notes = list(listener.notifies(timeout=5, stop_after=2))
    assert [float(note.payload.split()[1]) for note in notes] == [
        job.run_at.timestamp() for job in jobs
    ]
    app = due.App(role_without_notify)
    try:
        refused = app.task(name="t")(lambda n: None)
        with caplog.at_level(logging.WARNING, logger="due.store"):
            made = asyncio.run(enqueue_twice(refused))
        assert [postgres_app.get(job.id).args for job in made] == [(1,), (2,)]
        warned = [r for r in caplog.records if "store.wakeup_failed" in r.getMessage()]
        assert len(warned) == 2
    finally:
        app.close()
