"""The store's conformance suite: the contract of each `Store` operation, on both
backends.

tests/store/ as a whole is the conformance suite (every test there runs on a
real SQLite file and a real PostgreSQL, through the `Store` interface); this
module holds the operations the other modules reach only through the App, and
the guard that every operation of `Store` is exercised here, so a new one
cannot be added without its contract on both backends.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import pathlib
import threading
from collections.abc import Callable
from datetime import timedelta, timezone

import psycopg
import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.records import (
    BatchRequest,
    ClaimRequest,
    Completion,
    JobFilter,
    NewJob,
)
from due.core.schedules import Schedule
from due.errors import (
    ConfigurationError,
    InvalidStateError,
    NotMigratedError,
)
from due.request import JobRequest
from due.scheduler.registration import ScheduleTiming, define_for_app
from due.store import Store
from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from due.store.postgres.backend import with_channel_names
from tests.conftest import (
    BACKENDS_AND_POOLER,
    START,
    backend_fixture,
    made_schema,
    postgres_schema_url,
)

backend = backend_fixture(BACKENDS_AND_POOLER)  # also through a transaction pooler

HERE = pathlib.Path(__file__).parent


@pytest.fixture
def work(app: due.App) -> due.Task:
    @app.task(name="work")
    def work(n: int = 0) -> None: ...

    return work


def new_jobs(app: due.App, *numbers: int, queue: str = "default") -> list[NewJob]:
    return app._prepare([JobRequest("work", (n,), queue=queue) for n in numbers])


def claim(store: Store, limit: int = 1, queue: str = "default") -> list:
    return store.job_claim(ClaimRequest(queue, limit, "w", 30))


def every_minute(app: due.App, name: str = "tick") -> Schedule:
    timing = ScheduleTiming(None, 60, "UTC", "latest", "forbid", 10, 60)
    return define_for_app(
        app.tasks,
        name,
        timing,
        "work",
        (),
        None,
        None,
        None,
        max_payload_bytes=app.max_payload_bytes,
        now=START,
    )


# --- the guard ------------------------------------------------------------------------


def test_every_store_operation_is_exercised_by_the_conformance_suite() -> None:
    operations = {
        name
        for name, member in inspect.getmembers(Store)
        if not name.startswith("_") and inspect.isfunction(member)
    }
    called = set()
    for path in HERE.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                called.add(node.attr)
    assert operations - called == set()


# --- schema and plumbing -------------------------------------------------------------------


def test_check_schema_passes_when_current_and_refuses_an_empty_database(
    app: due.App, backend: str, tmp_path: pathlib.Path
) -> None:
    app.store.check_schema()
    if backend == "sqlite":
        empty = due.App(f"sqlite:///{tmp_path / 'empty.db'}")
        (tmp_path / "empty.db").touch()
        with pytest.raises(NotMigratedError):
            empty.store.check_schema()
        empty.close()


def elsewhere(action: Callable[[], object]) -> None:
    """Run `action` on another thread (so on SQLite, on another connection: a
    connection does not see its own commits in PRAGMA data_version)."""
    thread = threading.Thread(target=action)
    thread.start()
    thread.join(10)


def test_the_endings_feed_hears_a_job_end(app: due.App, work: due.Task) -> None:
    job = work.enqueue()
    feed = app.store.watch_endings()
    try:
        assert feed.wait(0)  # the first call: nothing was watched before it
        assert not feed.wait(0.05)
        elsewhere(lambda: app.store.job_cancel(job.id))
        assert feed.wait(5)
    finally:
        feed.close()


def test_the_jobs_feed_hears_a_new_job(app: due.App, work: due.Task, backend: str) -> None:
    feed = app.store.watch_jobs()
    try:
        assert feed.messages(0) == [""]  # a new feed heard nothing before it
        assert feed.messages(0.05) == []
        elsewhere(work.enqueue)
        heard = feed.messages(5)
        # PostgreSQL names the queue and the due time; SQLite says something changed,
        # and so does the poll through a transaction pooler (no LISTEN there).
        says_only_look = backend in ("sqlite", "pgbouncer")
        assert heard and (heard == [""] if says_only_look else heard[0].startswith("default "))
    finally:
        feed.close()


@pytest.mark.parametrize("backend", ["postgres"])
def test_deployments_in_two_schemas_of_a_database_do_not_wake_each_other(
    app: due.App, work: due.Task
) -> None:
    """NOTIFY reaches every listener of the database, whatever its schema: the
    schema is in the channel's name."""
    with made_schema() as schema:
        neighbour = due.App(postgres_schema_url(schema))
        try:
            neighbour.migrate()
            neighbour.task(name="work")(work.fn)
            feed = app.store.watch_jobs()
            try:
                assert feed.messages(0) == [""]
                elsewhere(lambda: neighbour.enqueue("work", args=[1]))
                assert feed.messages(0.3) == []
                elsewhere(lambda: work.enqueue(2))
                assert feed.messages(5)[0].startswith("default ")
            finally:
                feed.close()
        finally:
            neighbour.close()


@pytest.mark.parametrize("backend", ["postgres"])
def test_the_public_schema_keeps_the_bare_channel_names(app: due.App) -> None:
    """What due before per-schema channels listened on, for a rolling deploy."""
    with psycopg.connect(postgres_schema_url("public")) as conn:
        conn.execute("CREATE TABLE public.due_jobs ()")
        names = conn.execute(POSTGRES_QUERIES["channel_names"]).fetchone()
        conn.rollback()  # the table was there only to be named
    assert names == ("due_jobs", "due_ended")
    assert app.store.backend.channel_name("due_jobs").startswith("due_jobs.")  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["postgres"])
def test_statements_name_the_channels_by_literals_once_the_schema_is_checked(
    app: due.App, work: due.Task
) -> None:
    """The subquery naming a channel costs the server about 6 us per statement:
    a store whose schema was checked sends the name itself."""
    backend = app.store.backend
    channel = backend.channel_name("due_jobs")  # type: ignore[attr-defined]
    for n in range(6):  # psycopg prepares a statement on its fifth run
        work.enqueue(n)
    with backend.transaction(read=True) as tx:  # the session the enqueues used
        tx.cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row["statement"] for row in tx.cursor.fetchall()]  # type: ignore[attr-defined]
    # A single enqueue's wake-up follows its insert (postgres/woken_apart.py)
    (wake,) = [text for text in prepared if "pg_notify(" in text and "currval(" in text]
    assert f"pg_notify('{channel}'," in wake
    assert not [text for text in prepared if "pg_namespace" in text]


def test_unexpected_channel_names_are_refused() -> None:
    with pytest.raises(due.StoreError, match="channel name"):
        with_channel_names({"due_jobs": "due_jobs'; DROP TABLE x; --", "due_ended": "due_ended"})


# --- jobs ----------------------------------------------------------------------------


def test_enqueue_async_needs_an_async_connection(app: due.App, work: due.Task) -> None:
    with pytest.raises(ConfigurationError):
        asyncio.run(app.store.job_enqueue_async(new_jobs(app, 1), connection=object()))


@pytest.mark.parametrize("how", ["one", "bulk"])
def test_the_handle_an_enqueue_returns_is_the_job_as_stored(
    app: due.App, work: due.Task, how: str
) -> None:
    """The handle is built from the request, not read back: each field must be
    the one the store holds (a field out of place in the handle's making shows)."""
    in_an_hour = (START + timedelta(hours=1)).astimezone(timezone(timedelta(hours=-5)))
    requests = [
        JobRequest("work", (1,), queue="bulk", priority=7, key="k-1", delay=30),
        JobRequest("work", (), {"n": 2}),
        JobRequest("work", (3,), run_at=in_an_hour),
    ]
    if how == "one":
        handles = [app.store.job_enqueue(app._prepare([request]))[0] for request in requests]
    else:
        handles = app.store.job_enqueue(app._prepare(requests))
    names = [field.name for field in dataclasses.fields(due.Job)]
    for handle in handles:
        stored = app.get(handle.id)
        assert {name: getattr(handle, name) for name in names} == {
            name: getattr(stored, name) for name in names
        }
    assert handles[0].key == "k-1" and handles[0].priority == 7 and handles[0].queue == "bulk"
    assert handles[0].run_at == handles[0].created_at + timedelta(seconds=30)
    assert handles[1].run_at == handles[1].created_at and handles[1].kwargs == {"n": 2}
    assert handles[2].run_at == in_an_hour and handles[2].run_at.utcoffset() == timedelta(0)


def test_job_list_filters_and_returns_newest_first(app: due.App, work: due.Task) -> None:
    first, second = app.store.job_enqueue(new_jobs(app, 1, 2))
    (other,) = app.store.job_enqueue(new_jobs(app, 3, queue="bulk"))
    listed = app.store.job_list(JobFilter(queue="default"))
    assert [job.id for job in listed] == [second.id, first.id]
    assert [job.id for job in app.store.job_list(JobFilter(limit=1))] == [other.id]


def test_job_ended_returns_only_the_jobs_that_ended(app: due.App, work: due.Task) -> None:
    ended, waiting = app.store.job_enqueue(new_jobs(app, 1, 2))
    app.store.job_cancel(ended.id)
    assert [job.id for job in app.store.job_ended([ended.id, waiting.id])] == [ended.id]


def test_job_cancel_ends_a_queued_job_and_refuses_a_finished_one(
    app: due.App, work: due.Task
) -> None:
    queued, finished = app.store.job_enqueue(new_jobs(app, 1, 2))
    assert app.store.job_cancel(queued.id).state == JobState.CANCELLED
    assert app.store.job_cancel(queued.id).state == JobState.CANCELLED  # again: the same
    (running,) = claim(app.store, queue="default")
    assert running.id == finished.id
    done = Completion(running.id, running.lease_token, JobState.SUCCEEDED, result="null")
    app.store.job_complete([done])
    with pytest.raises(InvalidStateError):
        app.store.job_cancel(finished.id)


def test_job_retry_requeues_a_cancelled_job_with_fresh_attempts(
    app: due.App, work: due.Task
) -> None:
    (job,) = app.store.job_enqueue(new_jobs(app, 1))
    app.store.job_cancel(job.id)
    retried = app.store.job_retry(job.id)
    assert retried.state == JobState.QUEUED and retried.attempt == 0
    with pytest.raises(InvalidStateError):
        app.store.job_retry(job.id)  # queued: nothing to retry


def test_complete_and_claim_writes_the_ends_and_claims_in_one_call(
    app: due.App, work: due.Task
) -> None:
    first, second = app.store.job_enqueue(new_jobs(app, 1, 2))
    (running,) = claim(app.store)
    done = Completion(running.id, running.lease_token, JobState.SUCCEEDED, result="null")
    applied, claimed = app.store.job_complete_and_claim([done], ClaimRequest("default", 5, "w", 30))
    assert applied == {first.id} and [job.id for job in claimed] == [second.id]
    assert app.get(first.id).state == JobState.SUCCEEDED


# --- long work ---------------------------------------------------------------------------


def test_checkpoint_save_async_needs_an_async_connection(app: due.App, work: due.Task) -> None:
    app.store.job_enqueue(new_jobs(app, 1))
    (running,) = claim(app.store)
    with pytest.raises(ConfigurationError):
        asyncio.run(app.store.checkpoint_save_async(running.id, running.lease_token, "1", object()))


def test_batch_create_makes_a_waiting_parent_and_group_hold_pauses_its_pieces(
    app: due.App, work: due.Task
) -> None:
    parent_id = app.store.batch_create(BatchRequest("due.batch", new_jobs(app, 1, 2), None, "fail"))
    parent = app.get(parent_id)
    assert parent.state == JobState.WAITING and parent.pieces is not None
    assert parent.pieces.total == 2
    app.store.group_hold(parent_id, True)
    assert claim(app.store, 5) == []
    app.store.group_hold(parent_id, False)
    assert len(claim(app.store, 5)) == 2
    with pytest.raises(due.JobNotFoundError):
        app.store.group_hold(parent_id + 1000, True)


def test_an_empty_batch_settles_at_once(app: due.App, work: due.Task) -> None:
    parent_id = app.store.batch_create(BatchRequest("due.batch", [], None, "continue"))
    assert app.get(parent_id).state == JobState.SUCCEEDED


# --- queues ------------------------------------------------------------------------------


def test_queue_pause_stops_claims_and_shows_in_the_overview(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    app.store.job_enqueue(new_jobs(app, 1, 2))
    assert app.store.queue_due_names() == ["default"]
    assert not app.store.queue_in_use("nowhere") and app.store.queue_in_use("default")
    app.store.queue_pause("default", True)
    assert claim(app.store) == []
    (overview,) = app.store.queue_overview()
    assert (overview.name, overview.queued, overview.due, overview.paused) == (
        "default",
        2,
        2,
        True,
    )
    clock.advance("1m")
    assert overview.oldest_due_at == START
    app.store.queue_pause("default", False)
    assert len(claim(app.store, 5)) == 2


# --- schedules ---------------------------------------------------------------------------


def test_schedule_add_pause_trigger_and_remove(app: due.App, work: due.Task) -> None:
    schedule = every_minute(app)
    app.store.schedule_add(schedule)
    with pytest.raises(ConfigurationError):
        app.store.schedule_add(schedule)  # the name is taken
    assert app.store.schedule_next_fire() == START + timedelta(minutes=1)
    assert app.store.schedule_pause("tick", True) and not app.store.schedule_pause("nope", True)
    (overview,) = app.store.schedule_overview()
    assert overview.stored.paused and overview.last_run_at is None
    job = app.get(app.store.schedule_trigger("tick"))
    assert job.schedule == "tick" and job.state == JobState.QUEUED
    assert app.store.schedule_remove("tick") and not app.store.schedule_remove("tick")
    assert app.store.schedule_next_fire() is None
