"""SQLite's doorbell with real processes (store/sqlite/doorbell.py): a job
enqueued by one process wakes a worker in another at once, though that worker
looks for commits only every few seconds; the socket of a SIGKILLed worker is
cleared away; a folder the worker cannot write leaves it polling, and no
enqueue fails for it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import due
from due.store.sqlite.doorbell import folder_of
from tests.apps import doorbell_app
from tests.helpers.waiting import wait_until
from tests.helpers.workers import REPOSITORY

pytestmark = pytest.mark.slow

SLOW_POLL = 5.0
"""The workers' look for commits, slowed: only the doorbell wakes them sooner."""
PROMPT = 0.5
"""A pickup the doorbell (or a poll every 5 ms) makes; one slowed poll in ten at best."""


class Deployment:
    """A SQLite file, an enqueuing app in this process, worker processes beside it."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "due.db"
        self.url = f"sqlite:///{self.path}"
        self.ledger = tmp_path / "ledger.txt"
        self.logs = tmp_path
        self.folder = Path(folder_of(str(self.path)))
        self.app = doorbell_app.build(self.url, 0.005, str(self.ledger))
        self.app.migrate()
        self.workers: list[subprocess.Popen[bytes]] = []

    def start(self, commit_poll: float = SLOW_POLL) -> subprocess.Popen[bytes]:
        log = self.logs / f"worker-{len(self.workers)}.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")]),
        }
        command = ["-m", "tests.apps.doorbell_app", self.url, str(commit_poll), str(self.ledger)]
        with open(log, "wb") as out:
            worker = subprocess.Popen(
                [sys.executable, *command],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPOSITORY,
                start_new_session=True,
            )
        self.workers.append(worker)
        wait_until(
            lambda: "worker.started" in log.read_text() or worker.poll() is not None,
            what="the worker to start",
        )
        assert worker.poll() is None, log.read_text()
        return worker

    def sockets(self) -> set[str]:
        with contextlib.suppress(OSError):
            return set(os.listdir(self.folder))
        return set()

    def started_at(self, job_id: int) -> float | None:
        if not self.ledger.exists():
            return None
        for line in self.ledger.read_text().splitlines():
            _, job, _, at = line.split()
            if int(job) == job_id:
                return float(at)
        return None

    def pickup(self) -> float:
        """Seconds from an enqueue in this process to its job's start in a worker."""
        sent = time.time()
        job = self.app.enqueue("stamp")
        return wait_until(lambda: self.started_at(job.id), timeout=30, what="the start") - sent

    def close(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=10)
        self.app.close()


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path)
    yield made
    made.close()


def kill(worker: subprocess.Popen[bytes]) -> None:
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)


def test_a_job_from_another_process_wakes_a_worker_that_polls_every_five_seconds(
    deployment: Deployment,
) -> None:
    deployment.start()
    # Bound by its wake-up thread, which may run just after it says it started.
    wait_until(lambda: len(deployment.sockets()) == 1, what="the worker's doorbell")
    pickups = [deployment.pickup() for _ in range(3)]
    # Polling alone (every 5 s, claims every 60 s) would leave each job waiting
    # 2.5 s on average: 3 in a row under half a second, 1 in 1,000.
    assert max(pickups) < PROMPT, pickups


def test_the_socket_of_a_killed_worker_is_cleared_away(deployment: Deployment) -> None:
    killed = deployment.start()
    # Bound by its wake-up thread, which may run just after it says it started.
    wait_until(lambda: len(deployment.sockets()) == 1, what="the worker's doorbell")
    (left,) = deployment.sockets()
    kill(killed)
    assert deployment.sockets() == {left}  # SIGKILL: nobody removed it
    # A worker that binds sweeps the folder of sockets nobody listens on...
    survivor = deployment.start()
    wait_until(lambda: left not in deployment.sockets(), what="the dead socket swept away")
    assert deployment.sockets()  # the survivor's own
    assert deployment.pickup() < PROMPT
    kill(survivor)
    # ...and a ring refused removes the socket: the enqueue goes through.
    job = deployment.app.enqueue("stamp")
    assert deployment.sockets() == set()
    assert deployment.app.get(job.id).state == due.JobState.QUEUED


@contextlib.contextmanager
def unwritable(folder: Path, how: str) -> Iterator[None]:
    """The folder beside the database made so that no worker can bind in it."""
    if how == "a file in its place":
        folder.write_text("not a folder")
        yield
        return
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    # Root writes into any folder whatever its mode: only an immutable one stops it.
    try:
        refused = subprocess.run(["chattr", "+i", str(folder)], check=False).returncode != 0
    except FileNotFoundError:
        refused = True
    if refused:
        pytest.skip("running as root, and chattr +i is missing or refused here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.parametrize("how", ["read-only", "a file in its place"])
def test_a_folder_the_worker_cannot_write_leaves_it_polling(
    deployment: Deployment, how: str
) -> None:
    with unwritable(deployment.folder, how):
        deployment.start(commit_poll=0.005)  # the default
        assert deployment.sockets() == set()
        assert deployment.pickup() < PROMPT  # the poll found it; the enqueue did not fail
        assert deployment.sockets() == set()
