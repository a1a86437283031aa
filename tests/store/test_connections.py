"""PostgreSQL connections: the store's own connection (used when free, so a single
enqueue skips the pool) and the pool behind it (for every other thread)."""

from __future__ import annotations

import contextlib
import threading
import uuid

import psycopg
import pytest

import due
from tests.conftest import POSTGRES_BASE_URL
from tests.helpers.database import rows


@pytest.fixture
def named_url(postgres_url: str) -> str:
    """The test's URL with an application name of its own, so that only the
    connections of this test's app can be found and cut."""
    return f"{postgres_url}&application_name=due-conn-{uuid.uuid4().hex[:8]}"


class RollBack(Exception):
    pass


def make_app(url: str) -> tuple[due.App, due.Task[..., None]]:
    app = due.App(url)
    app.migrate()

    @app.task(name="t")
    def t(n: int) -> None: ...

    return app, t


def test_an_enqueue_neither_joins_nor_waits_for_another_threads_transaction(
    named_url: str,
) -> None:
    app, t = make_app(named_url)
    store = app.store
    try:
        inside, done = threading.Event(), threading.Event()
        committed: list[bool] = []

        def hold_a_transaction() -> None:
            with contextlib.suppress(RollBack), store._cursor(transaction=True) as cur:  # type: ignore[attr-defined]
                cur.execute("SELECT 1")
                inside.set()
                done.wait(10)
                committed.append(bool(rows(named_url, "SELECT count(*) FROM due_jobs")[0][0]))
                raise RollBack

        holder = threading.Thread(target=hold_a_transaction)
        holder.start()
        assert inside.wait(10)
        job = t.enqueue(1)  # must not wait for the holder, nor ride in its transaction
        done.set()
        holder.join(10)
        assert committed == [True], "the enqueue was not committed while the other was open"
        assert app.get(job.id).state == due.JobState.QUEUED, "the rollback took the job along"
    finally:
        app.close()


def test_enqueues_from_many_threads_each_land_once(postgres_url: str) -> None:
    app, t = make_app(postgres_url)
    try:
        ids: list[int] = []
        lock = threading.Lock()

        def enqueue_some(start: int) -> None:
            for n in range(start, start + 100):
                job_id = t.enqueue(n).id
                with lock:
                    ids.append(job_id)

        threads = [threading.Thread(target=enqueue_some, args=(k * 100,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(ids) == len(set(ids)) == 800
        stored = rows(postgres_url, "SELECT payload->'args'->>0 FROM due_jobs")
        assert sorted(int(n) for (n,) in stored) == list(range(800))
    finally:
        app.close()


def test_cut_connections_cost_at_most_one_failed_call(named_url: str) -> None:
    app, t = make_app(named_url)
    try:
        t.enqueue(0)
        name = named_url.rsplit("application_name=", 1)[1]
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as admin:
            cut = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            ).fetchone()
        assert cut and cut[0] >= 1
        outcomes = []
        for n in (1, 2):
            try:
                t.enqueue(n)
                outcomes.append("ok")
            except due.StoreUnavailableError as error:
                assert "unreachable" in str(error) or "connection" in str(error)
                outcomes.append("unavailable")
        assert outcomes[-1] == "ok", outcomes
        landed = {int(n) for (n,) in rows(named_url, "SELECT payload->'args'->>0 FROM due_jobs")}
        expected = {0} | {n for n, outcome in zip((1, 2), outcomes, strict=True) if outcome == "ok"}
        assert landed == expected
    finally:
        app.close()
