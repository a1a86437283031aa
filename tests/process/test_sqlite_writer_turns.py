"""SQLite's writer turns with a real worker process (store/sqlite/writer_turns.py):
one frozen while it holds its turn delays another process's write by one turn
wait (a tenth of the busy timeout, a second at most), not the busy timeout,
and the writer's log names it (issue 49, finding 13)."""

from __future__ import annotations

import logging
import signal
import sqlite3
import time
from pathlib import Path

import pytest

import due
from due.store.sqlite.writer_turns import SUFFIX
from tests.apps import ledger_app
from tests.helpers.waiting import wait_until
from tests.helpers.workers import WorkerProcess, Workers, app_with_tasks_of, holds_a_lock_on

HELD = "store.writer_turn_held"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/locks").exists(), reason="Linux lists its locks there"),
]


def stopped(pid: int) -> bool:
    """Whether the process is stopped (its SIGSTOP taken, not only sent)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")


def write_lock_free(path: str) -> bool:
    connection = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        connection.close()


def freeze_holding_its_turn(worker: WorkerProcess, path: str, attempts: int = 300) -> None:
    """SIGSTOP `worker` at a moment it holds its writer turn but not SQLite's
    write lock (between its turn and its transaction, or in its commit's
    checkpoint): the inverse of `Workers.pause`. A frozen holder of SQLite's
    own lock stalls every writer until its busy timeout, turns or none."""
    for _ in range(attempts):
        worker.signal(signal.SIGSTOP)
        wait_until(lambda: stopped(worker.pid), timeout=10, every=0.001, what="the stop")
        if holds_a_lock_on(worker.pid, path + SUFFIX) and write_lock_free(path):
            return
        worker.signal(signal.SIGCONT)
        time.sleep(0.005)  # (it writes on meanwhile)
    raise AssertionError(f"worker {worker.pid} held no turn alone at any of {attempts} stops")


def test_a_worker_frozen_holding_its_turn_delays_another_processs_write_by_a_second(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_with_tasks_of(sqlite_url, ledger_app.app)  # the default busy timeout: 30 s
    workers = Workers(sqlite_url, tmp_path / "ledger.txt", tmp_path)
    path = app.store.backend.path  # type: ignore[attr-defined]
    try:
        noop = app.tasks.get("noop")
        app.enqueue_many([noop.request() for _ in range(20_000)])
        busy = workers.start("--concurrency", "20")
        workers.wait_ready(busy)
        wait_until(lambda: workers.records("start"), what="the worker draining")
        freeze_holding_its_turn(busy, path)
        with caplog.at_level(logging.WARNING, logger="due.store"):
            started = time.monotonic()
            job = app.enqueue("noop")
            took = time.monotonic() - started
        assert took < 10, f"the write waited {took:.1f}s for the frozen worker's turn (30 s before)"
        assert app.get(job.id).state == due.JobState.QUEUED
        (held,) = [r for r in caplog.records if getattr(r, "event", None) == HELD]
        assert held.fields["holder"] == busy.pid  # type: ignore[attr-defined]
    finally:
        workers.stop_all()
        app.close()
