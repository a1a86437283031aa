"""Through a real PgBouncer in transaction mode: what due turns off when told,
what breaks (and how it is named) when it is not told, and where wake-ups come
from. (The worker, rescue, scheduler and long-work tests also run through it:
their `pgbouncer` parameter.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import due
from due.store.postgres.pooler import PoolerSettings
from tests.conftest import POSTGRES_BASE_URL
from tests.helpers.pgbouncer import PgBouncer
from tests.helpers.proxy import freezable_proxy
from tests.helpers.tools import need


@pytest.fixture(autouse=True)
def _pgbouncer() -> None:
    need("pgbouncer")


DATABASE = POSTGRES_BASE_URL.rsplit("/", 1)[1].split("?")[0]


@pytest.fixture
def one_server_connection(postgres_schema: str, tmp_path: Path) -> Iterator[PgBouncer]:
    """A bouncer lending a single server connection: every client shares its session."""
    with PgBouncer.start(
        tmp_dir=tmp_path / "pgbouncer",
        database=DATABASE,
        search_path=postgres_schema,
        settings={"default_pool_size": 1},
    ) as bouncer:
        yield bouncer


def make_app(url: str, **options: object) -> due.App:
    app = due.App(url, **options)  # type: ignore[arg-type]

    @app.task(name="work")
    def work(n: int = 0) -> None: ...

    return app


def busy(app: due.App, times: int = 8) -> None:
    """Enough statements for psycopg to prepare them (it does from the 5th use)."""
    for n in range(times):
        app.enqueue("work", args=[n])
        app.jobs(limit=1)


def test_told_nothing_the_breakage_is_named_with_its_fix(
    one_server_connection: PgBouncer, postgres_url: str
) -> None:
    make_app(postgres_url).migrate()
    first = make_app(one_server_connection.url())
    second = make_app(one_server_connection.url())
    try:
        with pytest.raises(due.StoreError, match="due_pooler=transaction"):
            busy(first)
            busy(second)
    finally:
        first.close()
        second.close()


def test_told_it_prepares_nothing_and_leaves_no_session_setting_behind(
    one_server_connection: PgBouncer, postgres_url: str
) -> None:
    make_app(postgres_url).migrate()
    apps = [make_app(one_server_connection.url(due_pooler="transaction")) for _ in range(2)]
    try:
        for app in apps:
            busy(app)
        assert len(apps[0].jobs(limit=100)) == 16
        (job,) = apps[1].jobs(limit=1)
        apps[0].cancel(job.id)
    finally:
        for app in apps:
            app.close()
    with psycopg.connect(one_server_connection.url(), prepare_threshold=None) as plain:
        prepared = plain.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        limits = plain.execute("SELECT current_setting('statement_timeout')").fetchone()
    assert prepared == (0,)
    assert limits == ("0",)  # due's 60 s bound was per transaction, not the session's


def test_with_a_listen_url_wakeups_are_notifications_and_without_one_polls(
    pgbouncer_url: str, postgres_url: str
) -> None:
    direct = make_app(postgres_url)
    direct.migrate()
    polled = make_app(pgbouncer_url)
    listening = make_app(pgbouncer_url, listen_url=postgres_url)
    feeds = [polled.store.watch_jobs(), listening.store.watch_jobs()]
    try:
        for feed in feeds:
            assert feed.messages(0) == [""]  # a new feed heard nothing before it
        threading.Thread(target=lambda: direct.enqueue("work")).start()
        heard = feeds[1].messages(5)
        assert heard and heard[0].startswith("default ")  # the queue and its due time
        assert feeds[0].messages(1) == [""]  # "look again", every 0.25 s
    finally:
        for feed in feeds:
            feed.close()
        for app in (direct, polled, listening):
            app.close()


def test_the_url_carries_the_settings_and_libpq_never_sees_them() -> None:
    base = "postgresql://app@pgbouncer:6432/app"
    listen = "postgresql%3A%2F%2Fapp%40primary%3A5432%2Fapp"
    settings = PoolerSettings.from_url(
        f"{base}?sslmode=prefer&due_pooler=transaction&due_listen_url={listen}"
    )
    assert settings.url == f"{base}?sslmode=prefer" and settings.transaction_pooler
    assert settings.listen_url == "postgresql://app@primary:5432/app"
    assert settings.connect_options() == {"prepare_threshold": None}
    assert PoolerSettings.from_url(base, pooler="session").connect_options() == {}
    spaced = f"{base}?options=-c%20statement_timeout%3D5s&application_name=my%20app"
    assert PoolerSettings.from_url(spaced).url == spaced  # untouched: libpq decodes it
    assert PoolerSettings.from_url(f"{spaced}&due_pooler=transaction").url == spaced
    with pytest.raises(due.ConfigurationError, match="not one of transaction, session"):
        PoolerSettings.from_url(f"{base}?due_pooler=statement")
    with pytest.raises(due.ConfigurationError, match="unknown due parameter"):
        PoolerSettings.from_url(f"{base}?due_poolr=transaction")
    with pytest.raises(due.ConfigurationError, match="listen_url is for a transaction"):
        PoolerSettings.from_url(base, listen_url="postgresql://primary/app")
    with pytest.raises(due.ConfigurationError, match="is for PostgreSQL"):
        due.App("sqlite:///x.db", pooler="transaction")


def test_through_a_pooler_single_statements_and_the_loop_lane_run_bounded(
    one_server_connection: PgBouncer,
) -> None:
    """Through a transaction-mode pooler due's bounds are set per transaction (a
    session setting would leak to other clients): its autocommitted statements
    (heartbeats, claims and acknowledgements on a thread, reads) and the
    worker's loop lane ran with none, so a claim waiting on a lock could wait
    for ever (issue 35). Each now runs in a transaction that sets them."""
    app = make_app(one_server_connection.url(due_pooler="transaction"))
    app.migrate()
    backend: Any = app.store.backend
    shown = "SELECT current_setting('statement_timeout') AS s, current_setting('lock_timeout') AS l"
    try:
        for kind in ({"single": True}, {"read": True}):
            with backend.transaction(**kind) as tx:
                tx.cursor.execute(shown)
                assert tx.cursor.fetchall() == [{"s": "1min", "l": "30s"}], kind
        lane = app.store.loop_lane(1)
        assert lane is not None

        async def on_the_lane() -> Any:
            await lane.open()
            try:
                async with lane.statement() as tx:
                    await tx.cursor.execute(shown)
                    return await tx.cursor.fetchall()
            finally:
                await lane.close()

        assert asyncio.run(on_the_lane()) == [{"s": "1min", "l": "30s"}]
        # ... and the shared session keeps the server's own settings.
        with psycopg.connect(one_server_connection.url()) as plain:
            assert plain.execute("SHOW statement_timeout").fetchone() == ("0",)
    finally:
        app.close()


def test_a_pooled_transaction_ends_with_its_commit_not_a_lone_flush(postgres_url: str) -> None:
    """psycopg follows a pipeline's Sync with a Flush. Were a transaction to end
    in a pipeline, its Flush could reach a transaction-mode pooler after the
    Sync's reply had let the server connection go: PgBouncer 1.18 lends the
    server again for it, a message with no reply, and keeps it lent to this
    idle client, so every other client waits (seen under load, with a pool of
    one). Each of due's connections must end its exchanges with a message the
    server replies to."""
    make_app(postgres_url).migrate()
    with freezable_proxy() as proxy:
        app = make_app(proxy.url_through(postgres_url) + "&due_pooler=transaction")
        try:
            for n in range(3):
                app.enqueue("work", args=[n])  # a single statement, in a transaction
                assert app.jobs(limit=1)  # a read, in a transaction
        finally:
            app.close()
    sent = [[kind for kind in kinds if kind != b"X"] for kinds in proxy.client_messages]
    used = [kinds for kinds in sent if kinds]
    assert used, "nothing went through the proxy"
    for kinds in used:
        assert kinds[-1] in (b"Q", b"S"), kinds  # the COMMIT, a simple query
    assert sum(kinds.count(b"Q") for kinds in used) >= 6  # a COMMIT per transaction
