"""SQLite: the writers of one process take turns on a lock of the process, so a
writer waits exactly as long as the one before it (SQLite's own wait for a busy
lock sleeps between tries: 1, 2, 5 ms and up to 100 ms); a writer of another
process is waited for within the busy timeout."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import due
from due.core.records import UnknownTaskSweep
from due.store.sqlite.backend import writer_lock


def make_app(url: str, **store_options: float) -> tuple[due.App, due.Task[..., None]]:
    app = due.App(url, store_options=store_options)
    app.migrate()

    @app.task(name="t")
    def t(n: int) -> None: ...

    return app, t


class BackgroundEnqueue:
    """`task.enqueue(n)` on a thread of its own: has it gone through yet?"""

    def __init__(self, task: due.Task[..., None], n: int) -> None:
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._enqueue, args=(task, n))
        self._thread.start()

    def _enqueue(self, task: due.Task[..., None], n: int) -> None:
        task.enqueue(n)
        self.done.set()

    def finished(self, timeout: float) -> bool:
        if not self.done.wait(timeout):
            return False
        self._thread.join(10)
        return True


def test_every_write_of_the_process_waits_for_the_writer_lock(sqlite_url: str) -> None:
    """Any app on the same file, any thread: held here, no write goes through."""
    app, t = make_app(sqlite_url)
    other, _ = make_app(sqlite_url)  # a second app on the same file, in this process
    lock = writer_lock(app.store.backend.path)  # type: ignore[attr-defined]
    try:
        with lock:
            writer = BackgroundEnqueue(t, 1)
            assert not writer.finished(0.3), "the enqueue did not wait for the writer lock"
            assert other.jobs() == []  # readers do not wait
        assert writer.finished(10)
        assert [job.args for job in other.jobs()] == [(1,)]
    finally:
        other.close()
        app.close()


def test_a_writer_waits_no_longer_than_its_busy_timeout(sqlite_url: str) -> None:
    app, t = make_app(sqlite_url, busy_timeout=0.2)
    lock = writer_lock(app.store.backend.path)  # type: ignore[attr-defined]
    refused: list[BaseException] = []

    def enqueue() -> None:
        try:
            t.enqueue(1)
        except due.StoreUnavailableError as error:
            refused.append(error)

    try:
        with lock:
            writer = threading.Thread(target=enqueue)
            writer.start()
            writer.join(10)
        (error,) = refused
        assert "stayed locked by another writer of this process" in str(error)
        assert app.jobs() == []  # nothing half-written
        t.enqueue(2)  # and the lock is free again
        assert [job.args for job in app.jobs()] == [(2,)]
    finally:
        app.close()


def test_one_lock_per_database_file(tmp_path: Path) -> None:
    first = str(tmp_path / "a.db")
    assert writer_lock(first) is writer_lock(str(tmp_path / "." / "a.db"))
    assert writer_lock(first) is not writer_lock(str(tmp_path / "b.db"))


def test_a_writer_of_another_process_delays_a_write_no_longer_than_its_busy_timeout(
    sqlite_url: str,
) -> None:
    """Another process holds the file's write lock (here, a connection of our
    own outside due): due tries again until its busy timeout, then says so,
    having written nothing. Its connection keeps the short wait of those tries
    from one write to the next, and has its full busy timeout for reads."""
    app, t = make_app(sqlite_url, busy_timeout=0.3)
    path = app.store.backend.path  # type: ignore[attr-defined]
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(due.StoreUnavailableError, match="stayed locked by another writer"):
            t.enqueue(1)
        other.execute("COMMIT")
        t.enqueue(2)
        conn = app.store.backend._connection()  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1
        t.enqueue(3)  # no setting back and forth around each write
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1
        assert [job.args for job in app.jobs()] == [(3,), (2,)]
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 300
        t.enqueue(4)  # and the next write, after a read, tries every millisecond again
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1
    finally:
        other.close()
        app.close()


def test_a_write_goes_through_once_another_process_lets_go(sqlite_url: str) -> None:
    app, t = make_app(sqlite_url)
    path = app.store.backend.path  # type: ignore[attr-defined]
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        writer = BackgroundEnqueue(t, 1)
        assert not writer.finished(0.2), "the enqueue did not wait for the other writer"
        other.execute("COMMIT")
        assert writer.finished(10)
        assert [job.args for job in app.jobs()] == [(1,)]
    finally:
        other.close()
        app.close()


def libc_fork() -> int:
    """fork(2) itself, as uWSGI without py-call-osafterfork forks: no fork
    handler of Python's runs. PyDLL: the GIL stays with this thread through the
    fork (CDLL lets it go, and a child could start with it held by a thread it
    lacks)."""
    import ctypes

    return int(ctypes.PyDLL(None).fork())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
@pytest.mark.parametrize("fork", [os.fork, libc_fork], ids=["os.fork", "libc-fork"])
def test_a_child_forked_while_a_writer_holds_the_lock_can_write(
    sqlite_url: str, fork: Callable[[], int]
) -> None:
    """A process forked while another of its threads held the writer lock: that
    thread does not exist in the child, and nothing there would release it.
    Python's fork handlers give the child locks of its own; without them (libc's
    fork) the locks see the new process at their next use."""
    app, t = make_app(sqlite_url, busy_timeout=2.0)
    t.enqueue(0)  # the process's lock and turns made, and used once
    lock = writer_lock(app.store.backend.path)  # type: ignore[attr-defined]
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        pid = fork()
        if pid == 0:  # the child: write, and say how it went, whatever happens
            code = 1
            try:
                child, child_task = make_app(sqlite_url, busy_timeout=2.0)
                child_task.enqueue(7)
                child.close()
                code = 0
            finally:
                os._exit(code)
        assert pid > 0
        deadline = time.monotonic() + 30
        ended, status = os.waitpid(pid, os.WNOHANG)
        while ended == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # (a child that hangs is killed, not waited for forever)
            ended, status = os.waitpid(pid, os.WNOHANG)
        if ended == 0:
            os.kill(pid, signal.SIGKILL)
            status = os.waitpid(pid, 0)[1]
        assert os.waitstatus_to_exitcode(status) == 0, "the child could not write"
    finally:
        done.set()
        holder.join(10)
    assert sorted(job.args for job in app.jobs()) == [(0,), (7,)]
    app.close()


def test_a_sweep_for_unknown_tasks_that_finds_none_does_not_wait_for_the_write_lock(
    sqlite_url: str,
) -> None:
    """The sweep read the old due jobs inside a write transaction: with a
    backlog of a million, every write of the database waited a second for it,
    every minute in every worker."""
    app, t = make_app(sqlite_url, busy_timeout=0.3)
    t.options(run_at=datetime.now(UTC) - timedelta(hours=2)).enqueue(1)
    other = sqlite3.connect(app.store.backend.path, isolation_level=None)  # type: ignore[attr-defined]
    try:
        other.execute("BEGIN IMMEDIATE")
        swept = app.store.job_fail_unknown_tasks(UnknownTaskSweep(["default"], ["t"], 3600))
        assert swept.failed == [] and swept.after == {}
        other.execute("COMMIT")
    finally:
        other.close()
        app.close()


def test_a_sweep_reads_on_past_jobs_due_at_one_instant(sqlite_url: str) -> None:
    """Jobs enqueued together share a run_at, which SQLite keeps as seconds
    finer than a microsecond: a position read back as a datetime fell after
    them, and the next sweep skipped the rest of them."""
    app, t = make_app(sqlite_url)

    @app.task(name="gone")
    def gone() -> None: ...

    jobs = app.enqueue_many([t.request(1), t.request(2), gone.request(), t.request(3)])
    due_at = (datetime.now(UTC) - timedelta(hours=2)).timestamp() // 1 + 0.0000007
    with sqlite3.connect(app.store.backend.path) as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE due_jobs SET run_at = ?", (due_at,))
    sweep = UnknownTaskSweep(["default"], ["t"], 3600, scan=2)
    try:
        first = app.store.job_fail_unknown_tasks(sweep)
        assert first.failed == [] and first.after["default"].id == jobs[1].id
        second = app.store.job_fail_unknown_tasks(replace(sweep, after=first.after))
        assert second.failed == [jobs[2].id]
    finally:
        app.close()


class RefusesRollback(sqlite3.Connection):
    """A connection whose ROLLBACK fails, as on an I/O error."""

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql == "ROLLBACK":
            raise sqlite3.OperationalError("disk I/O error")
        return super().execute(sql, *args)  # type: ignore[arg-type]


def _refused_at_commit(app: due.App, conn: sqlite3.Connection) -> None:
    """A write transaction on `conn` whose COMMIT SQLite refuses, leaving it
    open: a deferred foreign key (a full disk or an I/O error does the same)."""
    conn.execute("PRAGMA foreign_keys = ON")  # outside a transaction, or it is ignored
    conn.execute("CREATE TABLE IF NOT EXISTS parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS child"
        " (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    backend = app.store.backend
    refused = pytest.raises(due.StoreError, match="FOREIGN KEY")
    with refused, backend.transaction() as tx:  # type: ignore[attr-defined]
        tx.run("schema_version")  # a statement of the transaction's own cursor
        tx.connection.execute("INSERT INTO child VALUES (42)")  # checked at COMMIT
        tx.connection.execute(
            "INSERT INTO due_jobs (task, queue, payload, run_at, max_attempts, created_at)"
            " VALUES ('t', 'default', '{}', 0, 1, 0)"
        )


def _file_is_writable(sqlite_url: str) -> None:
    other = sqlite3.connect(Path(sqlite_url.removeprefix("sqlite:///")), timeout=0.5)
    with other:  # another process's write gets the lock
        assert other.execute("SELECT count(*) FROM child").fetchone() == (0,)
        other.execute("INSERT INTO parent VALUES (1)")
        other.execute("DELETE FROM parent")
    other.close()


def test_a_refused_commit_ends_its_transaction_and_frees_the_file(sqlite_url: str) -> None:
    """SQLite can refuse a COMMIT and keep the transaction open. The transaction
    must still end: else it keeps the file's write lock, and every later write
    of this thread and of every other process waits on it."""
    app, t = make_app(sqlite_url, busy_timeout=0.5)
    conn = app.store.backend._connection()  # type: ignore[attr-defined]  # this thread's
    try:
        _refused_at_commit(app, conn)
        assert not conn.in_transaction
        _file_is_writable(sqlite_url)
        t.enqueue(1)  # and this thread writes again
        assert [job.args for job in app.jobs()] == [(1,)]
    finally:
        app.close()


def test_a_connection_that_cannot_roll_back_is_closed_and_replaced(sqlite_url: str) -> None:
    app, t = make_app(sqlite_url, busy_timeout=0.5)
    backend = app.store.backend
    path = sqlite_url.removeprefix("sqlite:///")
    failing = sqlite3.connect(path, isolation_level=None, factory=RefusesRollback)
    backend._local.conn = failing  # type: ignore[attr-defined]  # this thread's connection
    try:
        _refused_at_commit(app, failing)
        with pytest.raises(sqlite3.ProgrammingError):  # closed: its transaction ended
            failing.execute("SELECT 1")
        _file_is_writable(sqlite_url)
        t.enqueue(1)  # on a new connection
        assert backend._connection() is not failing  # type: ignore[attr-defined]
        assert [job.args for job in app.jobs()] == [(1,)]
    finally:
        app.close()


CLOSE_WHILE_WRITING = """
import sqlite3, sys, threading, time
import due
from due.store.sqlite.backend import path_from_url, writer_lock

app = due.App(sys.argv[1])
app.migrate()
t = app.task(name="t")(lambda n: None)
t.enqueue(0)
holder = sqlite3.connect(path_from_url(sys.argv[1]), isolation_level=None)
holder.execute("BEGIN IMMEDIATE")  # another process's write: ours waits for it
outcome = []
writer = threading.Thread(target=lambda: outcome.append(t.enqueue(1)))
writer.start()
lock = writer_lock(path_from_url(sys.argv[1]))
deadline = time.monotonic() + 30  # until the write waits, holding the process's lock
while lock.acquire(blocking=False) and time.monotonic() < deadline:
    lock.release()
    time.sleep(0.005)
app.close()  # while the other thread's write waits on its connection
holder.execute("ROLLBACK")
writer.join(30)
print(sorted(job.args[0] for job in due.App(sys.argv[1]).jobs()), len(outcome))
"""


def test_closing_the_store_while_another_thread_writes_lets_that_write_end(
    sqlite_url: str,
) -> None:
    """`app.close()` (a web server shutting down) while a request's enqueue
    waits for the write lock: the enqueue ends on its connection, which is
    closed after it. Closing the connection under the thread crashed the
    process (a segfault in sqlite3)."""
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_WHILE_WRITING, sqlite_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["[0,", "1]", "1"], done.stdout


def test_a_read_inside_a_handlers_transaction_keeps_its_connection_from_close(
    sqlite_url: str,
) -> None:
    """`app.get` inside `ctx.transaction()` is a use of the connection inside a
    use: when it ends the connection is still in use, and `app.close()` from
    another thread must leave it to the handler's thread."""
    app, t = make_app(sqlite_url)
    job = t.enqueue(0)
    backend = app.store.backend
    with backend.handler_transaction() as (connection, _):
        assert app.get(job.id).args == (0,)  # the nested use
        closer = threading.Thread(target=app.close)
        closer.start()
        closer.join(timeout=30)
        assert connection.execute("SELECT count(*) FROM due_jobs").fetchone()[0] == 1
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        connection.execute("SELECT 1")  # closed by this thread once its use ended
