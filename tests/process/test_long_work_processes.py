"""Long work in real worker processes, killed with real signals, on both backends:
checkpoints a retry resumes from, cancellation within a heartbeat, pieces spread
over workers, pauses, stuck jobs, and the job's own transaction."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

import due
from due import JobState
from tests.conftest import BACKENDS_AND_POOLER, backend_fixture
from tests.helpers.cli import run_due
from tests.helpers.database import plain_transaction, rows
from tests.helpers.waiting import holds_for, wait_until
from tests.helpers.workers import Workers, wait_start_said

pytestmark = pytest.mark.slow
backend = backend_fixture(BACKENDS_AND_POOLER)  # also through a transaction pooler
LEASE = 2.0


def test_a_killed_backfill_resumes_from_its_checkpoint(app: due.App, workers: Workers) -> None:
    doomed = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(doomed)
    job = app.enqueue("copy_rows", kwargs={"rows": 300, "every": 10, "delay": 0.01})
    wait_until(lambda: len(workers.records("row")) >= 60, what="rows to be copied")
    doomed.signal(signal.SIGKILL)
    doomed.wait_exit()
    saved = app.get(job.id).checkpoint
    first_attempt = [int(r[5]) for r in workers.records("row")]
    assert saved is not None and saved % 10 == 0 and saved >= 50
    survivor = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(survivor)
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, timeout=60, what="success")
    resumes = [(int(r[2]), int(r[5])) for r in workers.records("resume")]
    # The retry starts at the last checkpoint stored: the one read after the
    # kill, or the next, when the killed process had sent it already (the
    # server finishes a statement it received; seen through the pooler).
    assert [attempt for attempt, _ in resumes] == [1, 2] and resumes[0][1] == 0
    resumed_from = resumes[1][1]
    assert resumed_from in (saved, saved + 10) and app.get(job.id).attempt == 2
    copied = Counter(int(r[5]) for r in workers.records("row"))
    assert sorted(copied) == list(range(300))  # nothing skipped
    again = sorted(row for row, times in copied.items() if times > 1)
    # Only rows after the last checkpoint are done again (the work between two
    # checkpoints must be idempotent), never the ones before it.
    assert again == list(range(resumed_from, max(first_attempt) + 1))
    assert len(again) <= 10
    assert app.get(job.id).progress == {"done": 300, "total": 300}


def test_a_killed_copy_with_checkpoints_in_its_transaction_writes_each_row_once(
    app: due.App, workers: Workers, backend_url: str
) -> None:
    with plain_transaction(backend_url) as conn:
        conn.execute("CREATE TABLE copied (row_number integer, attempt integer)")
    doomed = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(doomed)
    job = app.enqueue("copy_rows_once", kwargs={"rows": 300, "batch": 10, "delay": 0.005})
    wait_until(lambda: len(workers.records("batch")) >= 5, what="batches to be copied")
    doomed.signal(signal.SIGKILL)
    doomed.wait_exit()
    saved = app.get(job.id).checkpoint
    committed = rows(backend_url, "SELECT row_number FROM copied ORDER BY row_number")
    assert committed == [(n,) for n in range(saved)]  # the cursor and the rows agree
    survivor = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(survivor)
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, timeout=60, what="success")
    resumes = [(int(r[2]), int(r[5])) for r in workers.records("resume")]
    assert resumes == [(1, 0), (2, saved)]
    copied = rows(backend_url, "SELECT row_number, attempt FROM copied ORDER BY row_number")
    assert [row for row, _ in copied] == list(range(300))  # each row exactly once
    assert {attempt for row, attempt in copied if row >= saved} == {2}


@pytest.mark.parametrize("task", ["cancellable", "async_cancellable"])
def test_cancelling_a_running_job_ends_it_within_a_heartbeat(
    app: due.App, workers: Workers, backend: str, task: str
) -> None:
    # On PostgreSQL the request is also notified: the 30s lease (a beat every
    # 10s) shows it does not wait for the heartbeat. SQLite hears it at the beat.
    lease = 30.0 if backend == "postgres" else 3.0
    worker = workers.start("--lease", f"{lease}s")
    workers.wait_ready(worker)
    job = app.enqueue(task)
    wait_until(lambda: workers.records("start"), what="the job to start")
    asked_at = time.monotonic()
    # Asked while it runs; on PostgreSQL the worker may hear the request and
    # end the job before cancel's own read after its commit (seen once).
    assert app.cancel(job.id).state in (JobState.RUNNING, JobState.CANCELLED)
    wait_until(lambda: app.get(job.id).state == JobState.CANCELLED, timeout=30, what="cancel")
    took = time.monotonic() - asked_at
    bound = 2.0 if backend == "postgres" else lease / 3 + 1.5
    assert took <= bound, f"cancelled {took:.2f}s after the request"
    assert len(workers.records("end")) == 1  # its cleanup ran
    via = "notification" if backend == "postgres" else "heartbeat"
    assert f"via={via}" in worker.log()
    holds_for(
        lambda: len(workers.records("start")) == 1 and app.get(job.id).attempt == 1,
        0.3,
        what="not retried",
    )
    assert app.get(job.id).state == JobState.CANCELLED


def test_200_pieces_across_3_workers_complete_once_despite_a_kill(
    app: due.App, workers: Workers
) -> None:
    pool = [workers.start("--lease", f"{LEASE}s", "-c", "4") for _ in range(3)]
    for worker in pool:
        workers.wait_ready(worker)
    # Pieces of 0.1 s: 20 ms ones were all run within a third of a second, before a
    # worker that polls (through PgBouncer) on a busy machine had claimed one.
    parent = app.batch("piece", [(n, 0.1) for n in range(200)], on_complete="pieces_done")
    wait_until(
        lambda: (
            len({r[3] for r in workers.records("start")}) == 3
            and len(workers.records("start")) >= 50
        ),
        what="pieces to run in all three workers",
    )
    pool[0].signal(signal.SIGKILL)  # with pieces running: they are rescued
    wait_until(
        lambda: app.get(parent.id).state == JobState.SUCCEEDED, timeout=60, what="the parent"
    )
    done = app.get(parent.id)
    assert done.pieces == due.Pieces(total=200, succeeded=200, failed=0)
    pieces_run = Counter(int(r[5]) for r in workers.records("start"))
    assert sorted(pieces_run) == list(range(200))
    assert len({r[3] for r in workers.records("start")}) == 3  # all three took part
    (complete,) = workers.records("complete")  # exactly once
    assert complete[5:] == [str(parent.id), "200", "0"]
    holds_for(lambda: len(workers.records("complete")) == 1, 0.5, what="completed once")


def test_a_paused_queue_stops_starting_pieces_until_resumed(
    app: due.App, workers: Workers, backend_url: str
) -> None:
    worker = workers.start("-q", "bulk=2", "--lease", f"{LEASE}s")
    workers.wait_ready(worker)
    # Half a second a piece, two at a time: 15 s for the 60, which a pause from a
    # new `due` process (seconds to start on a loaded machine) must cut short
    # (at 0.05 s a piece all 60 had run before it, on a machine at load 10).
    parent = app.batch("bulk_piece", [(n, 0.5) for n in range(60)])
    wait_until(lambda: len(workers.records("start")) >= 10, what="pieces to run")
    assert "queue bulk is paused" in run_due(backend_url, "pause", "bulk")
    # The pieces claimed before the pause (running, or held ready) finish...
    wait_until(lambda: not app.jobs(queue="bulk", state="running"), what="claimed pieces")
    started = len(workers.records("start"))
    assert started < 60
    # ...and no other starts while the queue is paused.
    holds_for(lambda: len(workers.records("start")) == started, 1.0, what="the pause")
    status = run_due(backend_url, "status")
    assert "bulk" in status and "paused" in status
    assert app.get(parent.id).state == JobState.WAITING
    assert "queue bulk is resumed" in run_due(backend_url, "resume", "bulk")
    wait_until(lambda: app.get(parent.id).state == JobState.SUCCEEDED, timeout=60, what="all")
    pieces_run = Counter(int(r[5]) for r in workers.records("start"))
    assert sorted(pieces_run) == list(range(60)) and set(pieces_run.values()) == {1}


def test_a_job_whose_progress_stops_is_shown_stuck(
    app: due.App, workers: Workers, backend_url: str, tmp_path: Path
) -> None:
    worker = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(worker)
    # Silent until told: two commands (a new process each, seconds on a loaded
    # machine) must see it while it still runs.
    done = tmp_path / "done"
    job = app.enqueue("silent", kwargs={"seconds": 60, "until": str(done)})
    wait_until(lambda: app.jobs(stuck=True), timeout=10, what="the job to be flagged stuck")
    assert app.get(job.id).state == JobState.RUNNING  # stuck is a flag, not a verdict
    assert str(job.id) in run_due(backend_url, "jobs", "--stuck")
    status = run_due(backend_url, "status").splitlines()
    assert any(f" {job.id} " in line and "silent" in line and "stuck" in line for line in status)
    done.touch()
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, timeout=30, what="success")


def test_the_jobs_transaction_is_undone_by_a_kill_and_written_once(
    app: due.App, workers: Workers, backend_url: str
) -> None:
    with plain_transaction(backend_url) as conn:
        conn.execute("CREATE TABLE entries (job integer, attempt integer)")
    doomed = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(doomed)
    job = app.enqueue("post_entry", kwargs={"hold": 30})
    wait_until(lambda: workers.records("written"), what="the entry to be written")
    wait_start_said(backend_url, job.id)  # the killed attempt counts
    doomed.signal(signal.SIGKILL)  # inside the transaction, before its commit
    doomed.wait_exit()
    survivor = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(survivor)
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, timeout=60, what="success")
    assert rows(backend_url, "SELECT job, attempt FROM entries") == [(job.id, 2)]
    assert app.get(job.id).attempt == 2
