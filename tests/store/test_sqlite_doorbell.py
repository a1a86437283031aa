"""SQLite's doorbell (store/sqlite/doorbell.py), in one process: a commit that
makes a job claimable rings the sockets in the folder beside the database,
after its COMMIT and only then; a job left in the caller's open transaction
rings nothing and is found by the poll; a ring skips what it cannot reach.
(With real worker processes: tests/process/test_sqlite_doorbell.py.)"""

from __future__ import annotations

import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import due
from due.store.sqlite.doorbell import Doorbell, folder_of

QUICK = 5.0
"""Long enough for a ring on a loaded machine; a test that waits it out fails."""
QUIET = 0.2
"""How long a doorbell that should not ring is listened to."""


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "due.db"


def make_app(path: Path, **store_options: float) -> due.App:
    app = due.App(f"sqlite:///{path}", store_options=store_options)
    app.migrate()
    app.task(name="t")(lambda: None)
    return app


@pytest.fixture
def app(database: Path) -> Iterator[due.App]:
    made = make_app(database)
    yield made
    made.close()


@pytest.fixture
def doorbell(app: due.App, database: Path) -> Iterator[Doorbell]:
    """A worker's doorbell, as its job feed binds it."""
    bell = Doorbell.open(str(database))
    assert bell is not None
    yield bell
    bell.close()


@pytest.mark.parametrize("bad", [0, -1, "5", True, 61])
def test_commit_poll_takes_seconds(database: Path, bad: object) -> None:
    with pytest.raises(due.ConfigurationError, match="commit_poll= takes seconds"):
        due.App(f"sqlite:///{database}", store_options={"commit_poll": bad}).store  # noqa: B018


def test_an_enqueue_rings_once_committed(app: due.App, doorbell: Doorbell) -> None:
    assert not doorbell.wait(0)
    job = app.enqueue("t")
    assert doorbell.wait(QUICK)
    assert app.get(job.id).state == due.JobState.QUEUED  # committed before it rang
    assert not doorbell.wait(0)  # rings that came together wake once
    app.jobs()  # a read rings nothing
    assert not doorbell.wait(QUIET)


def test_a_job_in_the_callers_open_transaction_rings_nothing_and_the_poll_finds_it(
    database: Path, doorbell: Doorbell
) -> None:
    app = make_app(database, commit_poll=0.05)
    feed = app.store.watch_jobs()
    connection = sqlite3.connect(database)
    try:
        assert feed.messages(0) == [""]  # bound, and looked
        job = app.enqueue("t", connection=connection)
        assert connection.in_transaction
        # Not committed: a ring now would send the worker to find nothing.
        assert not doorbell.wait(QUIET)
        connection.commit()
        assert not doorbell.wait(QUIET)  # the caller's commit is out of due's sight...
        assert feed.messages(QUICK) == [""]  # ...and the poll sees it
        assert app.get(job.id).state == due.JobState.QUEUED
    finally:
        connection.close()
        feed.close()
        app.close()


def test_a_job_on_the_callers_connection_in_autocommit_rings(
    app: due.App, database: Path, doorbell: Doorbell
) -> None:
    connection = sqlite3.connect(database, isolation_level=None)
    try:
        app.enqueue("t", connection=connection)
        assert not connection.in_transaction
        assert doorbell.wait(QUICK)
    finally:
        connection.close()


def test_a_ring_removes_dead_sockets_and_leaves_anything_else(
    app: due.App, database: Path, doorbell: Doorbell
) -> None:
    folder = Path(folder_of(str(database)))
    dead = folder / "killed-worker"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as gone:
        gone.bind(str(dead))  # closed without its file removed, as by SIGKILL
    stray = folder / "notes.txt"
    stray.write_text("not a socket")
    app.enqueue("t")
    assert doorbell.wait(QUICK)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [Path(doorbell.path).name, "notes.txt"]
    )


def test_a_worker_that_binds_sweeps_dead_sockets(app: due.App, database: Path) -> None:
    folder = Path(folder_of(str(database)))
    folder.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as gone:
        gone.bind(str(folder / "killed-worker"))
    bell = Doorbell.open(str(database))
    assert bell is not None
    try:
        assert [p.name for p in folder.iterdir()] == [Path(bell.path).name]
    finally:
        bell.close()
    assert list(folder.iterdir()) == []  # a worker that stops removes its own


def test_a_database_path_too_long_for_a_socket_leaves_the_feed_polling(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    app = make_app(deep / "due.db")
    feed = app.store.watch_jobs()
    try:
        assert feed.messages(0) == [""]
        assert feed.doorbell is None  # type: ignore[attr-defined]
        thread = threading.Thread(target=lambda: app.enqueue("t"))  # another connection
        thread.start()
        thread.join(10)
        assert feed.messages(QUICK) == [""]
    finally:
        feed.close()
        app.close()
