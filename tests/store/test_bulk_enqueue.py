"""A bulk enqueue (`app.enqueue_many`) is all or none, however many statements
carry it: on PostgreSQL its rows go out in pipelined batches (run_many)."""

from __future__ import annotations

import pytest

import due
from due.store.postgres.backend import MANY_BATCH
from tests.helpers.database import plain_transaction

REFUSE = {
    "postgres": "ALTER TABLE due_jobs ADD CONSTRAINT no_refused CHECK (payload <> '"
    '{"args":[-1],"kwargs":{}}'
    "')",
    "sqlite": "CREATE TRIGGER refuse BEFORE INSERT ON due_jobs"
    ' WHEN NEW.payload = \'{"args":[-1],"kwargs":{}}\''
    " BEGIN SELECT RAISE(ABORT, 'no_refused'); END",
}

SKIP = {
    "postgres": "CREATE FUNCTION skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " RETURN NULL; END $$; CREATE TRIGGER skip BEFORE INSERT ON due_jobs FOR EACH ROW"
    ' WHEN (NEW.payload = \'{"args":[-1],"kwargs":{}}\') EXECUTE FUNCTION skip()',
    "sqlite": "CREATE TRIGGER skip BEFORE INSERT ON due_jobs"
    ' WHEN NEW.payload = \'{"args":[-1],"kwargs":{}}\''
    " BEGIN SELECT RAISE(IGNORE); END",
}


@pytest.fixture
def t(app: due.App) -> due.Task[..., None]:
    @app.task(name="t")
    def t(n: int) -> None: ...

    return t


def test_a_row_the_database_refuses_in_a_later_batch_writes_nothing(
    app: due.App, t: due.Task[..., None], backend: str, backend_url: str
) -> None:
    """Batches before it were inserted when the refusal came: they go too."""
    with plain_transaction(backend_url) as conn:
        conn.execute(REFUSE[backend])
    count = 3 * MANY_BATCH
    requests = [t.request(n) for n in range(count)]
    requests[2 * MANY_BATCH + 5] = t.request(-1)
    with pytest.raises(due.StoreError, match="no_refused"):
        app.enqueue_many(requests)
    assert app.jobs() == []
    requests[2 * MANY_BATCH + 5] = t.request(0)
    jobs = app.enqueue_many(requests)  # the store's connection was left fit to write
    stored = {job.id: job.args for job in app.jobs(limit=count)}
    assert [stored[job.id] for job in jobs] == [request.args for request in requests]


def test_every_row_of_every_batch_lands_once_in_order(app: due.App, t: due.Task[..., None]) -> None:
    count = 2 * MANY_BATCH + 1  # the last batch holds one row
    jobs = app.enqueue_many([t.options(priority=n % 7).request(n) for n in range(count)])
    assert [job.args for job in jobs] == [(n,) for n in range(count)]
    stored = {job.id: job for job in app.jobs(limit=count)}
    assert len(stored) == count
    assert [(stored[job.id].args, stored[job.id].priority) for job in jobs] == [
        ((n,), n % 7) for n in range(count)
    ]


def test_a_row_a_trigger_skips_fails_the_enqueue_rather_than_hand_back_no_job(
    app: due.App, t: due.Task[..., None], backend: str, backend_url: str
) -> None:
    """A user's trigger that drops rows without an error: the caller must not
    get a handle for a job that does not exist."""
    with plain_transaction(backend_url) as conn:
        conn.execute(SKIP[backend])
    requests = [t.request(n) for n in range(2 * MANY_BATCH)]
    requests[MANY_BATCH + 3] = t.request(-1)
    with pytest.raises(due.StoreError, match="did not store a job of task 't'"):
        app.enqueue_many(requests)
    with pytest.raises(due.StoreError, match="did not store a job of task 't'"):
        t.enqueue(-1)
    assert app.jobs() == []


def test_without_pipelines_the_batches_go_one_after_another(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A libpq older than 14 has no pipeline mode (`due[postgres]` takes the
    system's): a bulk enqueue must still work, its batches sent in turn."""
    import psycopg

    def unsupported(*args: object, **kwargs: object) -> None:
        raise psycopg.NotSupportedError("libpq too old")

    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    monkeypatch.setattr(psycopg.Connection, "pipeline", unsupported)
    app = due.App(postgres_url)
    app.migrate()
    t = app.task(name="t")(lambda n: None)
    try:
        count = 2 * MANY_BATCH + 1
        held = t.options(key="k7").enqueue(-7)
        jobs = app.enqueue_many([t.options(key=f"k{n}").request(n) for n in range(count)])
        assert jobs[7].id == held.id and jobs[7].deduplicated
        assert len(app.jobs(limit=1000)) == count
    finally:
        app.close()
