"""The chaos harness cleans up after itself: no worker outlives the run, however
the run ended (a harness killed outright, a faketime process killed alone)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import due
from tests.chaos.deployment import Deployment
from tests.helpers.tools import need
from tests.helpers.waiting import wait_until
from tests.helpers.workers import REPOSITORY


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie (exited, not yet reaped by its parent) is gone too.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def migrated(url: str) -> str:
    with due.App(url) as app:
        app.migrate()
    return url


@pytest.mark.timeout(120)
def test_workers_stop_when_the_harness_is_killed_outright(tmp_path: Path) -> None:
    url = migrated(f"sqlite:///{tmp_path / 'due.db'}")
    harness = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from tests.chaos.deployment import Deployment
        from tests.helpers.waiting import wait_until
        folder = Path({str(tmp_path)!r})
        deployment = Deployment({url!r}, folder, 2, folder / "ledger")
        deployment.start_all()
        wait_until(lambda: len(deployment.events("worker.started")) == 2, timeout=60)
        print(*(deployment.worker_pid(slot) for slot in deployment.slots), flush=True)
        time.sleep(600)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", harness], cwd=REPOSITORY, stdout=subprocess.PIPE, text=True
    )
    workers: list[int] = []
    try:
        assert process.stdout is not None
        workers += [int(pid) for pid in process.stdout.readline().split()]
        assert len(workers) == 2 and not any(gone(pid) for pid in workers)
        process.send_signal(signal.SIGKILL)  # no cleanup code runs
        process.wait(10)
        wait_until(lambda: all(gone(pid) for pid in workers), timeout=30, what="orphans to stop")
    finally:
        process.kill()
        process.wait()
        for pid in workers:  # should this fail: nothing left running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_kill_all_reaches_a_worker_whose_faketime_process_died(
    postgres_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL: on SQLite a worker whose clock is off refuses to start."""
    need("faketime")
    deployment = Deployment(migrated(postgres_url), tmp_path, 1, tmp_path / "ledger")
    deployment.skew(0)
    deployment.start_all()
    try:
        wait_until(lambda: deployment.events("worker.started"), timeout=60, what="the worker")
        (slot,) = deployment.slots
        worker = deployment.worker_pid(slot)
        assert slot.process is not None and worker != slot.process.pid  # faketime's child
        slot.process.kill()  # faketime alone: its worker lives on
        slot.process.wait(10)
        assert not gone(worker)
        deployment.kill_all()
        wait_until(lambda: gone(worker), timeout=10, what="the worker to die")
    finally:
        deployment.kill_all()
