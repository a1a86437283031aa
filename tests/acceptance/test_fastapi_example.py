"""examples/fastapi_app.py in a real uvicorn, on PostgreSQL through asyncpg, with a
real worker: a signup's job commits with its user, a failed signup leaves none."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import POSTGRES_BASE_URL
from tests.helpers.ports import free_port
from tests.helpers.waiting import wait_until
from tests.helpers.workers import REPOSITORY

EXAMPLES = REPOSITORY / "examples"
TOKEN = "a-long-random-secret-for-the-test"


@pytest.fixture
def database_url() -> Iterator[str]:
    """A database of its own (the example's tables are in `public`)."""
    name = f"due_fastapi_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield POSTGRES_BASE_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def started(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=EXAMPLES, env=env, stdout=out, stderr=out)


@contextlib.contextmanager
def running(
    command: list[str], env: dict[str, str], log: Path, exits: tuple[int, ...] = (0,)
) -> Iterator[None]:
    """The process, stopped at the end as a deployment stops it (SIGTERM)."""
    process = started(command, env, log)
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=30) in exits, log.read_text()
        finally:
            process.kill()


def call(
    url: str, method: str = "GET", body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(url, method=method)
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, data, timeout=10) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        text, status = error.read().decode(), error.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def answering(base: str) -> bool:
    try:
        return call(f"{base}/jobs/0")[0] == 404
    except OSError:
        return False


def test_signups_enqueue_in_their_transaction_and_the_worker_sends_the_email(
    database_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "DATABASE_URL": database_url, "DASHBOARD_TOKEN": TOKEN}
    due_cli = [sys.executable, "-m", "due", "--app", "fastapi_app:jobs"]
    subprocess.run([*due_cli, "migrate"], cwd=EXAMPLES, env=env, check=True, timeout=60)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    uvicorn = [sys.executable, "-m", "uvicorn", "fastapi_app:web", "--port", str(port)]
    # uvicorn ends by raising the signal again once it has shut down.
    with running(uvicorn, env, tmp_path / "uvicorn.log", exits=(0, -signal.SIGTERM)):
        wait_until(lambda: answering(base), timeout=60, what="uvicorn to answer")

        status, signup = call(f"{base}/signups", "POST", {"email": "ada@example.com"})
        assert status == 201, signup
        status, again = call(f"{base}/signups", "POST", {"email": "ada@example.com"})
        assert status == 409, again
        assert call(f"{base}/jobs/{signup['job_id']}")[1]["state"] == "queued"
        # The second signup's job was written before its user's INSERT failed at
        # the commit: it went with the rollback.
        with psycopg.connect(database_url) as conn:
            assert conn.execute("SELECT count(*) FROM due_jobs").fetchone() == (1,)
            assert conn.execute("SELECT count(*) FROM users").fetchone() == (1,)

        with running([*due_cli, "worker"], env, tmp_path / "worker.log"):
            job = wait_until(
                lambda: (
                    (found := call(f"{base}/jobs/{signup['job_id']}")[1])["state"] == "succeeded"
                    and found
                ),
                timeout=60,
                what="the welcome email to be sent",
            )
        assert job["result"] == "welcome email sent to ada@example.com"

        assert call(f"{base}/jobs-dashboard/")[0] == 401
        status, page = call(f"{base}/jobs-dashboard/", token=TOKEN)
        assert status == 200 and "send_welcome_email" in page
    assert "Application shutdown complete" in (tmp_path / "uvicorn.log").read_text()
