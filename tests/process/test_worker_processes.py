"""Real worker processes, real signals, both backends (invariants 1-3)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

import due
from due import JobState
from due.worker.main import YOUNG_GARBAGE_THRESHOLD
from tests.apps import ledger_app
from tests.conftest import BACKENDS_AND_POOLER, POSTGRES_BASE_URL, backend_fixture
from tests.helpers.database import cut_sessions
from tests.helpers.waiting import wait_until
from tests.helpers.workers import WorkerProcess, Workers, wait_start_said

pytestmark = pytest.mark.slow
backend = backend_fixture(BACKENDS_AND_POOLER)  # also through a transaction pooler
LEASE = 2.0


def starts_of(workers: Workers, job_id: int) -> list:  # type: ignore[type-arg]
    return [line for line in workers.ledger_lines() if line.kind == "start" and line.job == job_id]


def test_sigkill_mid_job_is_rescued_within_lease_plus_2s(app: due.App, workers: Workers) -> None:
    doomed = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(doomed)
    job = app.enqueue("work", kwargs={"seconds": 3})
    wait_until(lambda: starts_of(workers, job.id), what="the first attempt to start")
    survivor = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(survivor)
    wait_start_said(app.url, job.id)  # the killed attempt counts
    doomed.signal(signal.SIGKILL)
    killed_at = time.time()
    second = wait_until(lambda: starts_of(workers, job.id)[1:], timeout=30, what="a restart")[0]
    assert second.pid == survivor.pid
    assert second.at - killed_at <= LEASE + 2.0, f"restarted {second.at - killed_at:.2f}s after"
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, what="success")
    done = app.get(job.id)
    assert done.result == survivor.pid and done.attempt == 2
    assert done.errors[0].kind == "lease_lost"


def test_a_paused_worker_past_its_lease_records_nothing(app: due.App, workers: Workers) -> None:
    paused = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(paused)
    job = app.enqueue("work", kwargs={"seconds": 4})
    wait_until(lambda: starts_of(workers, job.id), what="the first attempt to start")
    wait_start_said(app.url, job.id)  # the paused attempt counts
    workers.pause(paused)
    other = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(other)
    wait_until(
        lambda: app.get(job.id).state == JobState.SUCCEEDED,
        timeout=30,
        what="the other worker to finish the job",
    )
    paused.signal(signal.SIGCONT)
    # The paused attempt wakes up, its sleep long over: its handler ends...
    wait_until(
        lambda: [
            line for line in workers.ledger_lines() if line.kind == "end" and line.pid == paused.pid
        ],
        what="the paused attempt to end",
    )
    wait_until(
        lambda: "job.result_discarded" in paused.log() or "job.lease_lost" in paused.log(),
        what="the paused worker to give the job up",
    )
    # ...and nothing it reports is recorded.
    done = app.get(job.id)
    assert done.state == JobState.SUCCEEDED and done.result == other.pid
    assert done.attempt == 2
    assert [line.pid for line in starts_of(workers, job.id)] == [paused.pid, other.pid]
    assert done.errors[0].kind == "lease_lost" and str(paused.pid) in (done.errors[0].error)


def test_sigterm_lets_a_short_job_finish_and_exits_0(app: due.App, workers: Workers) -> None:
    worker = workers.start("--grace", "10s")
    workers.wait_ready(worker)
    job = app.enqueue("work", kwargs={"seconds": 1})
    wait_until(lambda: starts_of(workers, job.id), what="the job to start")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=20) == 0
    done = app.get(job.id)
    assert done.state == JobState.SUCCEEDED and done.attempt == 1
    assert "worker.stopped" in worker.log()


def sigterm_while_running(
    app: due.App, workers: Workers, task: str, lease: str
) -> tuple[WorkerProcess, WorkerProcess, due.Job]:
    """A 20 s job of `task` running on one worker (grace 1 s), another worker
    ready beside it, and SIGTERM sent to the first."""
    leaving = workers.start("--grace", "1s", "--lease", lease)
    workers.wait_ready(leaving)
    job = app.enqueue(task, kwargs={"seconds": 20})
    wait_until(lambda: starts_of(workers, job.id), what="the job to start")
    staying = workers.start("--lease", lease)
    workers.wait_ready(staying)
    leaving.signal(signal.SIGTERM)
    return leaving, staying, job


def test_sigterm_releases_a_long_job_to_another_worker_at_once(
    app: due.App, workers: Workers
) -> None:
    """After the grace the handler is told to stop, and reaches its next safe
    point before the job is released: the next attempt never overlaps it
    (issue 35, hole 2: the release used to come first, and the old attempt
    kept working 0.2-0.5 s into the new one on PostgreSQL)."""
    leaving, staying, job = sigterm_while_running(app, workers, "ticking", "10s")
    signalled_at = time.time()
    assert leaving.wait_exit(timeout=10) == 0
    taken = wait_until(lambda: starts_of(workers, job.id)[1:], timeout=10, what="the pickup")[0]
    assert taken.pid == staying.pid
    assert taken.at - signalled_at < 1.0 + 1.0 + 2.0, "released jobs must not wait for the lease"
    steps = [
        float(at) for _, _, _, pid, at, *_ in workers.records("step") if int(pid) == leaving.pid
    ]
    last_step = max(steps)
    assert last_step < taken.at, "the released attempt still worked when the next began"
    released = app.get(job.id)
    assert released.attempt == 1  # the interrupted attempt is not counted
    assert released.errors[0].kind == "released"


def test_sigterm_hands_a_job_whose_thread_cannot_stop_back_for_after_its_lease(
    app: due.App, workers: Workers
) -> None:
    """A sync handler without a safe point cannot be stopped: its job is handed
    back as it stands, due once the lease it held expires, when the worker that
    ran it has exited and taken the thread with it. Never two at once, and the
    interrupted attempt is not counted."""
    leaving, staying, job = sigterm_while_running(app, workers, "work", "3s")
    assert leaving.wait_exit(timeout=10) == 0
    exited_at = time.time()
    assert "worker.handed_back_running" in leaving.log()
    taken = wait_until(lambda: starts_of(workers, job.id)[1:], timeout=15, what="the pickup")[0]
    assert taken.pid == staying.pid and taken.at > exited_at
    handed = app.get(job.id)
    assert handed.attempt == 1  # neither the interrupted attempt nor its lease's end counted
    assert [e.kind for e in handed.errors] == ["released", "lease_lost"]
    assert "due again once its lease expires" in handed.errors[0].error


def test_the_first_ctrl_c_says_a_second_stops_at_once_and_a_second_does(
    app: due.App, workers: Workers
) -> None:
    """The drain's line tells an operator who will not wait out the grace how
    to stop at once, and what it costs; the second Ctrl-C does just that: the
    worker exits long before its grace, the job handed back unspent."""
    worker = workers.start("--grace", "10m")
    workers.wait_ready(worker)
    job = app.enqueue("async_work", kwargs={"seconds": 600})
    wait_until(lambda: starts_of(workers, job.id), what="the job to start")
    worker.signal(signal.SIGINT)
    wait_until(lambda: "worker.draining" in worker.log(), what="the drain's line")
    (draining,) = [line for line in worker.log().splitlines() if "worker.draining" in line]
    assert "a second Ctrl-C (SIGINT or SIGTERM) stops at once" in draining, draining
    assert "hands the running jobs back" in draining, draining
    worker.signal(signal.SIGINT)
    assert worker.wait_exit(timeout=30) == 0
    handed = app.get(job.id)
    assert (handed.state, handed.attempt) == (JobState.QUEUED, 0), handed  # not spent
    assert [error.kind for error in handed.errors] == ["released"]


def test_four_workers_run_10000_jobs_exactly_once(app: due.App, workers: Workers) -> None:
    noop = app.tasks.get("noop")
    jobs = app.enqueue_many([noop.request() for _ in range(10_000)])
    pool = [workers.start("-q", "default=20") for _ in range(4)]
    wait_until(
        lambda: len(app.jobs(state="succeeded", limit=20_000)) == 10_000,
        timeout=120,
        every=0.25,
        what="all 10,000 jobs to succeed",
    )
    starts = Counter(line.job for line in workers.ledger_lines() if line.kind == "start")
    assert set(starts) == {job.id for job in jobs}
    assert max(starts.values()) == 1, "a job ran twice"
    busy = {line.pid for line in workers.ledger_lines()}
    assert len(busy) >= 2, "the work should be shared"
    for worker in pool:
        worker.signal(signal.SIGTERM)
    assert [worker.wait_exit() for worker in pool] == [0, 0, 0, 0]


def test_a_flood_on_bulk_does_not_delay_emails(app: due.App, workers: Workers) -> None:
    bulk = app.tasks.get("bulk_work")
    app.enqueue_many([bulk.request(seconds=1.0) for _ in range(10_000)])
    worker = workers.start("-q", "bulk=2", "-q", "emails=2")
    workers.wait_ready(worker)
    wait_until(lambda: len(workers.ledger_lines()) >= 2, what="bulk to be busy")
    enqueued_at = time.time()
    job = app.enqueue("email")
    line = wait_until(lambda: starts_of(workers, job.id), timeout=10, what="the email")[0]
    assert line.at - enqueued_at < 0.5, f"email waited {line.at - enqueued_at:.3f}s"


def test_a_poison_job_is_failed_after_3_crashes_and_the_pool_survives(
    app: due.App, workers: Workers
) -> None:
    supervisor = workers.start("--processes", "2", "--lease", f"{LEASE}s")
    job = app.enqueue("poison")
    wait_until(
        lambda: app.get(job.id).state == JobState.FAILED,
        timeout=60,
        every=0.1,
        what="the poison job to be failed",
    )
    failed = app.get(job.id)
    assert "lost its lease 3 times in a row" in (failed.last_error or "")
    assert len(starts_of(workers, job.id)) == 3
    after = app.enqueue("work")
    wait_until(
        lambda: app.get(after.id).state == JobState.SUCCEEDED,
        timeout=30,
        what="the pool to keep working",
    )
    assert supervisor.process.poll() is None
    supervisor.process.send_signal(signal.SIGTERM)
    assert supervisor.wait_exit(timeout=30) == 0


def test_a_delayed_job_starts_on_time_without_a_notification(
    app: due.App, workers: Workers
) -> None:
    worker = workers.start()
    workers.wait_ready(worker)
    due_at = time.time() + 1.5
    job = app.enqueue("work", delay=1.5)
    line = wait_until(lambda: starts_of(workers, job.id), timeout=10, what="the delayed job")[0]
    assert -0.05 < line.at - due_at < 0.5, f"started {line.at - due_at:+.3f}s from its due time"


def test_the_worker_rides_out_lost_database_connections(postgres_url: str, tmp_path: Path) -> None:
    """PostgreSQL only: SQLite has no server whose connections can be cut."""
    app = due.App(postgres_url)
    app.migrate()
    for task in ledger_app.app.tasks:
        app.tasks.add(due.Task(app, task.fn, task.name, task.config))
    workers = Workers(postgres_url, tmp_path / "ledger.txt", tmp_path)
    try:
        # libpq names the worker's connections, so only they are cut (a name of
        # this test's own: another run on the same server keeps its sessions)
        name = f"due-test-worker-{uuid.uuid4().hex[:8]}"
        worker = workers.start("--lease", "3s", env={"PGAPPNAME": name})
        workers.wait_ready(worker)
        first = app.enqueue("work")
        wait_until(lambda: app.get(first.id).state == JobState.SUCCEEDED, what="the first job")
        cut = cut_sessions(POSTGRES_BASE_URL, name)
        assert cut >= 3, "the worker's connections (pool and LISTEN) should be cut"
        second = app.enqueue("work")
        wait_until(
            lambda: app.get(second.id).state == JobState.SUCCEEDED,
            timeout=30,
            what="the worker to reconnect and run the next job",
        )
        assert worker.process.poll() is None
        assert "store_error" in worker.log() or "wakeups_lost" in worker.log()
    finally:
        workers.stop_all()
        app.close()


def test_an_enqueue_during_an_outage_fails_with_a_clear_error(clock: due.FakeClock) -> None:
    unreachable = due.App("postgresql://127.0.0.1:1/app", store_options={"connect_timeout": 0.5})

    @unreachable.task(name="t")
    def t() -> None: ...

    with pytest.raises(due.StoreUnavailableError, match=r"app on 127\.0\.0\.1:1"):
        t.enqueue()
    unreachable.close()


def test_one_log_line_per_job_end_and_warning_quiets_them(app: due.App, workers: Workers) -> None:
    chatty = workers.start()
    workers.wait_ready(chatty)
    job = app.enqueue("work")
    wait_until(lambda: "job.succeeded" in chatty.log(), what="the job's log line")
    (line,) = [line for line in chatty.log().splitlines() if "job.succeeded" in line]
    assert " INFO " in line
    for field in (f"job={job.id}", "task=work", "queue=default", "attempt=1", "duration_ms="):
        assert field in line, line
    chatty.signal(signal.SIGTERM)
    assert chatty.wait_exit() == 0

    quiet = workers.start("--log-level", "warning")
    second = app.enqueue("work")
    wait_until(lambda: app.get(second.id).state == JobState.SUCCEEDED, what="the second job")
    quiet.signal(signal.SIGTERM)
    assert quiet.wait_exit() == 0
    assert "job.succeeded" not in quiet.log(), quiet.log()


@pytest.mark.parametrize(("options", "loop"), [((), "uvloop"), (("--loop", "asyncio"), "asyncio")])
def test_a_worker_runs_on_uvloop_when_installed_and_on_asyncio_when_told(
    app: due.App, workers: Workers, options: tuple[str, ...], loop: str
) -> None:
    worker = workers.start(*options)
    workers.wait_ready(worker)
    (started,) = [line for line in worker.log().splitlines() if "worker.started" in line]
    assert f"loop={loop}" in started, started
    job = app.enqueue("work")
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, what="the job")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0


def test_a_worker_process_collects_young_garbage_less_often_and_freezes_its_start(
    app: due.App, workers: Workers
) -> None:
    """A worker allocates a few dozen objects a job, freed within milliseconds:
    its process collects the youngest generation every 7,000 allocations, not
    700, and never looks again at what it loaded at start."""
    worker = workers.start()
    workers.wait_ready(worker)
    job = app.enqueue("garbage_collection")
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, what="the job")
    settings = app.get(job.id).result
    assert settings["young_threshold"] == YOUNG_GARBAGE_THRESHOLD
    assert settings["frozen"] > 10_000  # modules, the app: everything loaded before the jobs
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0


def test_a_worker_that_handed_back_a_running_job_is_forced_out_in_time() -> None:
    """The safety of a hand-back rests on the process being gone (its thread with
    it) before the job's lease can end: should the shutdown's last steps take
    longer, the process exits anyway, whatever thread still runs."""
    script = (
        "import threading, time, logging\n"
        "logging.basicConfig()\n"
        "from due.worker.main import _exit_within\n"
        "threading.Thread(target=time.sleep, args=(60,)).start()  # not a daemon\n"
        "_exit_within(0.3)\n"
        "time.sleep(60)  # the shutdown's last steps, stuck\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and time.monotonic() - started < 10
    assert "worker.exit_forced" in done.stderr
