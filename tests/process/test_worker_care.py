"""Workers that take care of themselves (issue 41): health probes, the start
and exit lines, recycling past a job count or a memory size. Real processes,
real signals."""

from __future__ import annotations

import re
import signal
import socket
import urllib.error
import urllib.request
from collections import Counter

import pytest
from prometheus_client import generate_latest

import due
from due import JobState
from due.visibility.metrics import registry_for
from due.worker.recycling import RECYCLE_EXIT_CODE
from tests.conftest import backend_fixture
from tests.helpers.waiting import wait_until
from tests.helpers.workers import WorkerProcess, Workers

pytestmark = pytest.mark.slow
backend = backend_fixture(["sqlite", "postgres"])


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def probe_when_up(port: int, path: str) -> tuple[int, str]:
    """`probe`, with a refused connection read as "not up yet": a recycled
    child's replacement binds its port a moment after the old one lets go."""
    try:
        return probe(port, path)
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return 0, "refused"
        raise


def health_port(worker: WorkerProcess) -> int:
    found = wait_until(
        lambda: re.search(r"worker\.health_serving port=(\d+)", worker.log()),
        what="the health server",
    )
    return int(found[1])


def free_ports(count: int) -> int:
    """The first of `count` ports in a row that are free now."""
    for _ in range(100):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
        try:
            for offset in range(count):
                with socket.socket() as taken:
                    taken.bind(("0.0.0.0", port + offset))
        except OSError:
            continue
        return port
    raise AssertionError("no free ports in a row")


def starts(workers: Workers) -> Counter[int]:
    return Counter(line.job for line in workers.ledger_lines() if line.kind == "start")


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_probes_answer_and_readyz_says_503_while_draining(
    app: due.App, workers: Workers, backend_url: str
) -> None:
    worker = workers.start("--health-port", "0", "--grace", "10s")
    workers.wait_ready(worker)
    port = health_port(worker)
    started = next(line for line in worker.log().splitlines() if "worker.started" in line)
    assert "concurrency=" in started and "queues=" in started
    assert "database=postgresql://" in started
    wait_until(lambda: probe(port, "/readyz") == (200, "ok\n"), what="readiness")
    assert probe(port, "/livez") == (200, "ok\n")
    assert probe(port, "/metrics")[0] == 404

    job = app.enqueue("work", kwargs={"seconds": 3})
    wait_until(lambda: starts(workers)[job.id], what="the job to start")
    worker.signal(signal.SIGTERM)
    _, text = wait_until(
        lambda: (answer := probe(port, "/readyz"))[0] == 503 and answer,
        what="readiness to end at shutdown",
    )
    assert "draining" in text
    assert probe(port, "/livez")[0] == 200  # alive: finishing its job
    assert worker.wait_exit() == 0
    assert app.get(job.id).state == JobState.SUCCEEDED
    (stopped,) = [line for line in worker.log().splitlines() if "worker.stopped" in line]
    assert "ran=1 succeeded=1 failed=0 cancelled=0 released=0" in stopped


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_lone_worker_past_its_job_count_drains_and_exits_75(
    app: due.App, workers: Workers
) -> None:
    """Without a supervisor the process leaves for its process manager to
    restart; the jobs it did not start stay for the next worker, untouched."""
    jobs = [app.enqueue("work", kwargs={"seconds": 0.05}) for _ in range(6)]
    worker = workers.start("-q", "default=1", "--max-jobs-per-process", "3")
    assert worker.wait_exit() == RECYCLE_EXIT_CODE
    assert sorted(starts(workers).values()) == [1, 1, 1]
    left = [app.get(job.id) for job in jobs if job.id not in starts(workers)]
    assert [(job.state, job.attempt) for job in left] == [(JobState.QUEUED, 0)] * 3
    log = worker.log()
    assert "worker.recycling reason=jobs jobs=3" in log
    assert re.search(r"worker\.stopped .*ran=3 succeeded=3 .*recycled=jobs", log), log
    assert app.store.worker_recycles() == {"jobs": 1}  # counted with its stop


def test_a_child_past_its_memory_is_replaced_and_no_job_is_lost_or_run_twice(
    app: due.App, workers: Workers
) -> None:
    """Each job leaks 10 MB; each child is recycled past 150 MB while the jobs
    keep flowing through the others and their replacements."""
    leaky = app.tasks.get("leaky")
    jobs = app.enqueue_many([leaky.request() for _ in range(40)])
    supervisor = workers.start(
        "--processes", "2", "-q", "default=1", "--max-memory-per-process", "150MB"
    )
    wait_until(
        lambda: len(app.jobs(state="succeeded", limit=100)) == len(jobs),
        timeout=90,
        every=0.2,
        what="every job to succeed",
    )
    ran = starts(workers)
    assert set(ran) == {job.id for job in jobs} and max(ran.values()) == 1
    log = supervisor.log()
    assert "worker.recycling reason=memory" in log
    assert "supervisor.child_recycled" in log
    pids = {line.pid for line in workers.ledger_lines()}
    assert len(pids) > 2, "the children should have been replaced"
    supervisor.process.send_signal(signal.SIGTERM)
    assert supervisor.wait_exit() == 0
    # Counted in the database, whichever process recycled: Prometheus reads it.
    recycled = supervisor.log().count("worker.recycling reason=memory")
    scraped = generate_latest(registry_for(app)).decode()
    assert f'due_worker_recycles_total{{reason="memory"}} {recycled}.0' in scraped
    assert 'due_worker_recycles_total{reason="jobs"} 0.0' in scraped


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_child_past_its_job_count_is_replaced(app: due.App, workers: Workers) -> None:
    """...and each child answers the probes on --health-port + its slot."""
    work = app.tasks.get("work")
    jobs = app.enqueue_many([work.request(seconds=0.02) for _ in range(20)])
    port = free_ports(2)
    supervisor = workers.start(
        "--processes", "2", "-q", "default=1", "--max-jobs-per-process", "4",
        "--health-port", str(port),
    )  # fmt: skip
    wait_until(
        lambda: len(app.jobs(state="succeeded", limit=100)) == len(jobs),
        timeout=60,
        every=0.2,
        what="every job to succeed",
    )
    ran = starts(workers)
    assert set(ran) == {job.id for job in jobs} and max(ran.values()) == 1
    per_process = Counter(line.pid for line in workers.ledger_lines() if line.kind == "start")
    assert max(per_process.values()) <= 4
    assert re.search(r"supervisor\.child_recycled .*recycled=\d", supervisor.log())
    assert len({line.pid for line in workers.ledger_lines()}) > 2
    for child in (port, port + 1):
        wait_until(
            lambda c=child: probe_when_up(c, "/readyz")[0] == 200, what=f"the child on {child}"
        )
    supervisor.process.send_signal(signal.SIGTERM)
    assert supervisor.wait_exit() == 0
