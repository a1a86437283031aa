"""A worker cut off from PostgreSQL stops its job before another worker runs it
(faults issue, hole 1; invariant 8).

The worker reaches the database through a proxy the test freezes: sockets
stay open and no byte passes, as in a partition or a hung proxy. Its heartbeat
call blocks; its trust in the lease must still end on the monotonic clock, so
the job stops at its next safe point before the lease expires and another
worker's rescue starts it again. After the thaw the worker carries on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import due
from due import JobState
from tests.apps import ledger_app
from tests.helpers.database import rows
from tests.helpers.proxy import FreezableProxy, freezable_proxy
from tests.helpers.waiting import wait_until
from tests.helpers.workers import LedgerLine, Workers

pytestmark = pytest.mark.slow
LEASE = 2.0


@pytest.fixture
def proxy() -> Iterator[FreezableProxy]:
    with freezable_proxy() as running:
        yield running


@pytest.fixture
def app(postgres_url: str) -> Iterator[due.App]:
    application = due.App(postgres_url)
    application.migrate()
    for task in ledger_app.app.tasks:
        application.tasks.add(due.Task(application, task.fn, task.name, task.config))
    yield application
    application.close()


@pytest.fixture
def workers(postgres_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(postgres_url, tmp_path / "ledger.txt", tmp_path)
    yield pool
    pool.stop_all()


def lines(workers: Workers, kind: str, pid: int | None = None) -> list[LedgerLine]:
    parsed = [
        LedgerLine(kind, int(job), int(attempt), int(pid_), float(at))
        for _, job, attempt, pid_, at, *_ in workers.records(kind)
    ]
    return [line for line in parsed if pid is None or line.pid == pid]


def test_a_frozen_connection_stops_the_job_before_another_worker_runs_it(
    app: due.App, workers: Workers, proxy: FreezableProxy, postgres_url: str
) -> None:
    cut_off = workers.start(
        "--lease", f"{LEASE}s", env={"DUE_DATABASE_URL": proxy.url_through(postgres_url)}
    )
    workers.wait_ready(cut_off)
    job = app.enqueue("ticking", kwargs={"seconds": 12.0})
    wait_until(lambda: lines(workers, "step", cut_off.pid), what="the job to start")
    survivor = workers.start("--lease", f"{LEASE}s")
    workers.wait_ready(survivor)
    # Its heartbeat has said the handler began: the cut-off attempt counts.
    started = f"SELECT 1 FROM due_jobs WHERE id = {job.id} AND attempt_status = 'started'"
    wait_until(lambda: rows(postgres_url, started), what="the start to be said")
    proxy.freeze()
    frozen_at = time.time()
    taken_over = wait_until(
        lambda: lines(workers, "start", survivor.pid), timeout=30, what="a takeover"
    )[0]
    wait_until(lambda: lines(workers, "end", cut_off.pid), timeout=10, what="the first to stop")
    (stopped,) = lines(workers, "end", cut_off.pid)
    last_step = max(line.at for line in lines(workers, "step", cut_off.pid))
    # The cut-off attempt stopped within its trust (lease x 0.8 after its last
    # renewal, a step of 0.05 s), before the other worker started the job.
    assert stopped.at - frozen_at < LEASE, f"it ran {stopped.at - frozen_at:.2f}s past the freeze"
    assert last_step < taken_over.at and stopped.at < taken_over.at, (
        f"both attempts alive at once: last step {last_step:.3f}, end {stopped.at:.3f}, "
        f"takeover {taken_over.at:.3f}"
    )
    proxy.thaw()
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, timeout=30, what="success")
    done = app.get(job.id)
    assert done.result == survivor.pid and done.attempt == 2  # nothing of the first landed
    # Thawed, the cut-off worker works again: a job only it can take is run
    # (enqueued once the other has exited: before, the other could claim it first).
    survivor.signal(15)
    assert survivor.wait_exit() == 0
    cut_off_only = app.enqueue("ticking", kwargs={"seconds": 0.1})
    wait_until(
        lambda: app.get(cut_off_only.id).state == JobState.SUCCEEDED,
        timeout=60,
        what="the thawed worker to run a job",
    )
    assert app.get(cut_off_only.id).result == cut_off.pid


def test_a_claim_whose_reply_is_lost_costs_no_attempt(
    app: due.App, workers: Workers, proxy: FreezableProxy, postgres_url: str
) -> None:
    """The connection breaks right after the server committed a claim: the worker
    never sees its job. Once the lease expires the job goes back without
    spending an attempt (issue 35, hole 4: its only attempt was spent, and it
    was failed as "lease expired on the last attempt" without having run)."""
    proxy.cut_next_claim()
    worker = workers.start(
        "--lease", f"{LEASE}s", env={"DUE_DATABASE_URL": proxy.url_through(postgres_url)}
    )
    workers.wait_ready(worker)
    job = app.enqueue("one_shot", kwargs={})
    wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, timeout=30, what="success")
    assert proxy.claims_cut == 1
    done = app.get(job.id)
    assert done.attempt == 1 and len(lines(workers, "start")) == 1
    (lost,) = done.errors
    assert lost.kind == "lease_lost" and "never said its handler began" in lost.error
