"""A database password appears in no message, repr, log line, page or JSON
document (invariant 16): a sweep over everything that shows a URL, with the
password in the URL's userinfo and in its `?password=` at once. It was shown
whole by the `--app`/`--url` mismatch, a `listen_url` of the wrong scheme,
and `repr(App)`."""

from __future__ import annotations

import asyncio
import getpass
import logging
import signal
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

import due
from tests.apps import ledger_app
from tests.helpers.cli import run_command, run_due
from tests.helpers.workers import Workers, app_with_tasks_of

SECRET = "s3cr3t-pw"
UNREACHABLE = f"postgresql://app:{SECRET}@127.0.0.1:1/app?password={SECRET}"


@pytest.fixture
def secret_url(postgres_url: str) -> str:
    """The test's database as a URL that carries the password twice (the server
    trusts local connections, so it is never asked for)."""
    base, _, query = postgres_url.partition("?")
    scheme, _, rest = base.partition("://")
    return f"{scheme}://{getpass.getuser()}:{SECRET}@{rest}?{query}&password={SECRET}"


def refusal(call: Callable[[], Any]) -> str:
    """What a refused call shows: its message, repr and whole traceback (causes too)."""
    with pytest.raises(due.DueError) as refused:
        call()
    return "".join(traceback.format_exception(refused.value)) + repr(refused.value)


def test_the_app_and_its_errors_never_show_the_password(
    secret_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    nested = quote(f"postgresql://app:{SECRET}@10.0.0.1/app", safe="")
    apps = [
        due.App(secret_url),
        due.App(f"{secret_url}&due_pooler=transaction&due_listen_url={nested}"),
        due.App(UNREACHABLE),
    ]
    shown = [
        repr(apps[0]),
        repr(apps[1]),
        refusal(
            lambda: due.App(secret_url, pooler="transaction", listen_url=f"mysql://a:{SECRET}@h")
        ),
        refusal(lambda: due.App(f"{secret_url}&due_pooler=transaction&due_listen_url=x{nested}")),
        refusal(lambda: due.App(f"sqlite://app:{SECRET}@host/due.db")),
        refusal(lambda: due.App(f"host=127.0.0.1 password={SECRET} dbname=app")),
        refusal(lambda: due.App(f"host=127.0.0.1 password='{SECRET}:x' dbname=app")),
        refusal(lambda: apps[2].get(1)),
        refusal(lambda: asyncio.run(apps[2].await_job(1, timeout=0.5))),
    ]
    for app in apps:
        app.close()
    for text in [*shown, caplog.text]:
        assert SECRET not in text
    assert "***" in shown[0] and "127.0.0.1:5432" in shown[0]  # still says which database


def test_the_command_line_and_the_dashboard_never_show_the_password(
    secret_url: str, tmp_path: Path
) -> None:
    app = due.App(secret_url)
    app.migrate()
    echo = app.task(name="echo")(lambda text: text)
    job = echo.enqueue("hello")
    (tmp_path / "secretapp.py").write_text(f"import due\napp = due.App({secret_url!r})\n")
    other = secret_url.replace("127.0.0.1", "localhost")
    outputs = [
        run_command(tmp_path, "--app", "secretapp:app", "--url", other, "jobs"),
        run_command(tmp_path, "--app", "secretapp:app", "worker", "--leader-url", other),
        run_command(tmp_path, "--url", UNREACHABLE, "jobs"),
    ]
    shown = [done.stdout + done.stderr for done in outputs]
    assert all(done.returncode == 1 for done in outputs), shown
    for command in (["status"], ["jobs"], ["show", str(job.id)], ["workers"], ["schedules"]):
        shown += [run_due(secret_url, *command), run_due(secret_url, *command, "--json")]
    with TestClient(app.dashboard(), base_url="http://127.0.0.1") as client:
        for page in ("/", "/jobs", f"/jobs/{job.id}", "/schedules", "/workers", "/metrics"):
            response = client.get(page)
            assert response.status_code == 200
            shown.append(response.text)
    app.close()
    for text in shown:
        assert SECRET not in text
    assert "uses database 'postgresql://" in shown[0] and ":***@127.0.0.1" in shown[0]


@pytest.fixture
def workers(secret_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(secret_url, tmp_path / "ledger.txt", tmp_path)
    yield pool
    pool.stop_all()


@pytest.mark.slow
def test_a_workers_log_never_shows_the_password(secret_url: str, workers: Workers) -> None:
    app = app_with_tasks_of(secret_url, ledger_app.app)
    worker = workers.start("--log-level", "debug")
    workers.wait_ready(worker)
    job = app.tasks.get("noop").enqueue()
    assert app.wait(job.id, timeout=30).state == due.JobState.SUCCEEDED
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0
    app.close()
    assert "worker.started" in worker.log() and SECRET not in worker.log()


# Passwords libpq cannot read as written (a space, a bare %, a raw @ or /),
# and the pieces of each that must not show, as a whole or apart.
ODD_PASSWORDS = {
    "w1th sp4ce": ["w1th", "sp4ce"],
    "pa%zz1": ["pa%zz1"],
    "p@ss wd/x": ["p@ss", "ss wd", "wd/x"],
    "k3y=v4l u3": ["k3y=v4l", "v4l u3"],
}


@pytest.mark.parametrize("password", ODD_PASSWORDS)
def test_a_password_libpq_cannot_read_is_not_shown_either(
    password: str, postgres_url: str, tmp_path: Path
) -> None:
    urls = [
        f"postgresql://app:{password}@127.0.0.1:5432/app",
        f"postgresql://127.0.0.1:5432/app?password={password}&sslmode=disable",
    ]
    shown = [refusal(lambda: due.App(f"host=127.0.0.1 password={password} dbname=app"))]
    for url in urls:
        app = due.App(url)
        shown += [repr(app), refusal(lambda app=app: app.get(1))]  # type: ignore[misc]
        app.close()
    (tmp_path / "oddapp.py").write_text(f"import due\napp = due.App({urls[0]!r})\n")
    mismatch = run_command(tmp_path, "--app", "oddapp:app", "--url", urls[1], "jobs")
    assert mismatch.returncode == 1 and "give one" in mismatch.stderr, mismatch.stderr
    shown.append(mismatch.stdout + mismatch.stderr)
    for text in shown:
        for piece in ODD_PASSWORDS[password]:
            assert piece not in text
    assert "cannot be read" in shown[2] and "percent-encode" in shown[2]
