"""The chaos suite's server faults act on a cluster of its own, never on the
machine's shared server, whose sessions are other test runs' (a second `make
test`, another engineer's, CI); and that cluster is gone once its run ends,
however it ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.chaos.deployment import Deployment
from tests.chaos.faults import SERVER_FAULTS, Injector
from tests.helpers import private_postgres as private
from tests.helpers.waiting import wait_until
from tests.helpers.workers import REPOSITORY

pytestmark = pytest.mark.slow


def answers(conn: psycopg.Connection[Any]) -> bool:
    try:
        return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


def accepts(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=5):
            return True
    except psycopg.OperationalError:
        return False


def started_at(url: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
    assert row is not None
    return row[0]


@pytest.mark.timeout(180)
def test_the_server_faults_end_the_private_cluster_s_sessions_and_no_other(
    private_postgres: private.PrivatePostgres, postgres_url: str, tmp_path: Path
) -> None:
    """A session on the shared server (another run's, in its own schema) lives
    through a restart and a termination of every session; the private
    cluster's own sessions do not."""
    url = private_postgres.url()
    name = f"due-witness-{uuid.uuid4().hex[:8]}"
    deployment = Deployment(url, tmp_path, 1, tmp_path / "ledger")
    injector = Injector(deployment, url, 1.0, SERVER_FAULTS, server=private_postgres)
    with (
        psycopg.connect(f"{postgres_url}&application_name={name}", autocommit=True) as witness,
        psycopg.connect(url, autocommit=True) as own,
    ):
        injector._terminate_connections()
        assert not answers(own), "the private cluster's session should have been ended"
        assert answers(witness), "a session on the shared server was ended"
        before = started_at(url)
        injector._restart_postgres()
        assert started_at(url) != before, "the private cluster should have restarted"
        assert answers(witness), "a session on the shared server was ended"
    assert [fault.kind for fault in injector.log] == ["terminate_connections", "restart_postgres"]


def test_the_server_faults_are_refused_without_a_private_cluster(
    postgres_url: str, tmp_path: Path
) -> None:
    deployment = Deployment(postgres_url, tmp_path, 1, tmp_path / "ledger")
    for kind in SERVER_FAULTS:
        with pytest.raises(ValueError, match="private cluster"):
            Injector(deployment, postgres_url, 1.0, ["kill", kind])


@pytest.fixture
def can_make_clusters() -> None:
    if (missing := private.missing()) is not None:
        pytest.skip(missing)


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("can_make_clusters")
def test_a_private_cluster_is_stopped_and_removed_when_its_block_fails() -> None:
    with pytest.raises(RuntimeError, match="the run failed"), private.private_cluster() as server:
        folder, url = server.folder, server.url()
        assert accepts(url) and server.data.is_dir()
        raise RuntimeError("the run failed")
    assert not folder.exists()
    assert not accepts(url)


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("can_make_clusters")
def test_a_cluster_left_by_a_run_killed_outright_is_removed_by_the_next() -> None:
    """SIGKILL runs no cleanup: the next cluster made removes the one whose
    process is gone."""
    holder = textwrap.dedent(
        """
        import time
        from tests.helpers.private_postgres import private_cluster
        with private_cluster() as server:
            print(server.folder, server.url(), flush=True)
            time.sleep(600)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", holder],
        cwd=REPOSITORY,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "src")]),
        },
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        folder_text, url = process.stdout.readline().split()
        folder = Path(folder_text)
        assert accepts(url)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        assert folder.exists() and accepts(url), "left over"
        with private.private_cluster():
            assert not folder.exists()
        wait_until(lambda: not accepts(url), timeout=30, what="the left-over server to stop")
    finally:
        process.kill()
        process.wait()
