"""SQLite's doorbell (store/sqlite/doorbell.py), in one process: a commit that
makes a job claimable rings the sockets in the folder beside the database,
after its COMMIT and only then; a job left in the caller's open transaction
rings nothing and is found by the poll; a ring skips what it cannot reach,
and what is not a socket at no cost. The folder is open to who may write the
database only, and one that is not due's is not used (beside.py).
(With real worker processes: tests/process/test_sqlite_doorbell.py.)"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import due
from due.store.sqlite import doorbell as bells
from due.store.sqlite.doorbell import Doorbell, folder_of

QUICK = 5.0
"""Long enough for a ring on a loaded machine; a test that waits it out fails."""
QUIET = 0.2
"""How long a doorbell that should not ring is listened to."""
NOBODY = 65534


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


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


@contextlib.contextmanager
def spy(path: Path) -> Iterator[socket.socket]:
    """A socket of someone else's, listening at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listening:
        listening.bind(str(path))
        listening.setblocking(False)
        yield listening


def heard(listening: socket.socket) -> bool:
    try:
        listening.recv(16)
    except BlockingIOError:
        return False
    return True


def test_stray_files_in_the_folder_cost_an_enqueue_nothing(
    app: due.App, doorbell: Doorbell, database: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 49, finding 14: every ring listed the folder and sent to every entry,
    and what is not a socket stayed: with 20,000 stray files an enqueue took
    164 ms, not 1.9. A ring reads the folder again only when it changed, and a
    listing reads MAX_ENTRIES entries at most (saying so, once). Measured in
    this process's CPU time: the machine's load does not count."""
    folder = Path(folder_of(str(database)))
    for i in range(20_000):
        (folder / f"stray-{i}").touch()
    with caplog.at_level(logging.WARNING, logger="due.store"):
        app.enqueue("t")  # read once
        started = time.process_time()
        for _ in range(100):
            app.enqueue("t")
        spent = time.process_time() - started
    assert spent < 3.0, f"100 enqueues took {spent:.2f}s of CPU (12 s before the fix)"
    (crowded,) = events(caplog, "store.wake_folder_crowded")
    assert crowded.fields["read"] == bells.MAX_ENTRIES  # type: ignore[attr-defined]
    assert len(list(folder.iterdir())) == 20_001  # nothing of anyone's removed


@pytest.mark.parametrize(
    ("database_mode", "folder_mode", "socket_mode"),
    [(0o644, 0o700, 0o600), (0o664, 0o770, 0o660), (0o666, 0o777, 0o666)],
)
def test_the_folder_and_sockets_are_open_to_who_may_write_the_database_only(
    database: Path, database_mode: int, folder_mode: int, socket_mode: int
) -> None:
    """Made from the database's mode, others could list the folder (and, with a
    database others may write, bind in it): now each class of user that may
    write the database, and no other, may ring, whatever the umask."""
    database.touch()
    database.chmod(database_mode)
    previous = os.umask(0o077)
    try:
        bell = Doorbell.open(str(database))
    finally:
        os.umask(previous)
    assert bell is not None
    try:
        assert Path(folder_of(str(database))).stat().st_mode & 0o777 == folder_mode
        assert Path(bell.path).stat().st_mode & 0o777 == socket_mode
    finally:
        bell.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder for another user needs root")
def test_a_folder_and_socket_made_as_root_belong_to_the_databases_owner(database: Path) -> None:
    """As SQLite's -wal and -shm files: the database owner's processes can ring
    a worker run as root, and remove its socket when it was killed."""
    database.touch()
    os.chown(database, NOBODY, NOBODY)
    bell = Doorbell.open(str(database))
    assert bell is not None
    try:
        for made in (Path(folder_of(str(database))), Path(bell.path)):
            assert (made.stat().st_uid, made.stat().st_gid) == (NOBODY, NOBODY)
    finally:
        bell.close()


def test_a_folder_found_open_to_more_users_is_closed_to_them(app: due.App, database: Path) -> None:
    """Made by an earlier due (0755), or by hand: set to the rule's by its owner."""
    database.chmod(0o644)
    folder = Path(folder_of(str(database)))
    folder.mkdir()
    folder.chmod(0o777)
    bell = Doorbell.open(str(database))
    assert bell is not None
    try:
        assert folder.stat().st_mode & 0o777 == 0o700
    finally:
        bell.close()


def test_a_symbolic_link_in_the_folders_place_is_not_used(
    app: due.App, database: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 49, finding 14: a link there was followed: the worker bound its
    socket where the link's maker chose, and every ring went there too."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    Path(folder_of(str(database))).symlink_to(theirs)
    with spy(theirs / "listener") as listening, caplog.at_level(logging.WARNING):
        assert Doorbell.open(str(database)) is None  # the worker polls
        app.enqueue("t")
        assert not heard(listening)
        assert list(theirs.iterdir()) == [theirs / "listener"]
    (refused,) = events(caplog, "store.file_refused")
    assert "symbolic link" in refused.fields["reason"]  # type: ignore[attr-defined]


def test_a_link_in_the_folder_is_never_rung(
    app: due.App, database: Path, doorbell: Doorbell, tmp_path: Path
) -> None:
    """A send follows a link: one to another program's socket would be written to."""
    with spy(tmp_path / "another-programs") as listening:
        (Path(folder_of(str(database))) / "link").symlink_to(tmp_path / "another-programs")
        app.enqueue("t")
        assert doorbell.wait(QUICK)  # the worker's own socket was rung
        assert not heard(listening)


@pytest.mark.skipif(os.geteuid() != 0, reason="a folder of another user (nobody) needs root")
def test_a_folder_made_by_a_user_who_may_not_write_the_database_is_not_used(
    app: due.App, database: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 49, finding 14: its owner could remove a worker's socket, or put a
    socket of theirs in its place and hear its rings."""
    database.chmod(0o644)
    folder = Path(folder_of(str(database)))
    folder.mkdir()
    with spy(folder / "theirs") as listening, caplog.at_level(logging.WARNING):
        os.chown(folder, NOBODY, NOBODY)
        os.chown(folder / "theirs", NOBODY, NOBODY)
        assert Doorbell.open(str(database)) is None  # the worker polls
        app.enqueue("t")
        assert not heard(listening)
    (refused,) = events(caplog, "store.file_refused")
    assert f"uid {NOBODY}" in refused.fields["reason"]  # type: ignore[attr-defined]
