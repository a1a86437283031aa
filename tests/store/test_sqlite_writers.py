"""SQLite: the writers of one process take turns on a lock of the process, so a
writer waits exactly as long as the one before it (SQLite's own wait for a busy
lock sleeps between tries: 1, 2, 5 ms and up to 100 ms)."""

from __future__ import annotations

import threading
from pathlib import Path

import due
from due.store.sqlite.backend import writer_lock


def make_app(url: str, **store_options: float) -> tuple[due.App, due.Task[..., None]]:
    app = due.App(url, store_options=store_options)
    app.migrate()

    @app.task(name="t")
    def t(n: int) -> None: ...

    return app, t


def test_every_write_of_the_process_waits_for_the_writer_lock(sqlite_url: str) -> None:
    """Any app on the same file, any thread: held here, no write goes through."""
    app, t = make_app(sqlite_url)
    other, _ = make_app(sqlite_url)  # a second app on the same file, in this process
    lock = writer_lock(app.store.backend.path)  # type: ignore[attr-defined]
    done = threading.Event()

    def enqueue() -> None:
        t.enqueue(1)
        done.set()

    try:
        with lock:
            writer = threading.Thread(target=enqueue)
            writer.start()
            assert not done.wait(0.3), "the enqueue did not wait for the writer lock"
            assert other.jobs() == []  # readers do not wait
        assert done.wait(10)
        writer.join(10)
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
