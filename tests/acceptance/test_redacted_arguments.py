"""Redacted arguments appear in no output (invariant 16): not in `due show`,
`due jobs`, `due status` (each as text and as `--json`), the dashboard's job
page and list, a worker's log, nor a failed attempt's error; and the handler
still receives them. The commands run in other processes, without the task's
code: what they hide was stored with the job."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import pytest
from starlette.testclient import TestClient

import due
from due.shown_arguments import shown_arguments
from due.worker.settings import WorkerSettings
from due.worker.worker import Worker
from tests.helpers.cli import run_due_in
from tests.helpers.waiting import async_wait_until

PASSWORD = "pw-hunter2-raw"  # a default name, given by position
AUTHORIZATION = "Bearer auth-raw-9f"  # a default name, a key inside a dict argument
TOKEN = "tok-deep-raw-71"  # a default name, a key in a dict in a list
CARD = "4242-card-raw"  # the task's own redact=, given by keyword
SSN = "ssn-raw-123-45"  # the app's redact=, a key, written in another case
SECRETS = (PASSWORD, AUTHORIZATION, TOKEN, CARD, SSN)


def test_redacted_values_appear_in_no_output(
    backend_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    app = due.App(backend_url, redact=["ssn"])
    app.migrate()
    received: list[Any] = []

    @app.task(name="login", redact=["card"], retry=due.Retry(max_attempts=1))
    def login(user: str, password: str, options: dict[str, Any], card: str = "") -> None:
        received.append((password, options, card))
        raise ValueError(f"refused {user} with {password}, {card} and {options}")

    options = {
        "headers": {"Authorization": AUTHORIZATION},
        "items": [{"token": TOKEN, "shown": "visible-value"}],
        "SSN": SSN,
    }
    job = login.enqueue("ada", PASSWORD, options, card=CARD)
    asyncio.run(_run_until_failed(app, job.id))
    assert received == [(PASSWORD, options, CARD)]  # the handler gets the values

    ended = app.get(job.id)
    assert ended.state == due.JobState.FAILED
    assert ended.args[1] == PASSWORD  # kept, for the handler (and a retry)
    assert "refused ada with •••" in (ended.last_error or "")
    shown = [ended.last_error or "", ended.errors[-1].traceback or "", caplog.text]
    shown += [repr(job), repr(ended)]
    for command in (["show", str(job.id)], ["jobs"], ["status"]):
        shown += [due_command(backend_url, *command), due_command(backend_url, *command, "--json")]
    with TestClient(app.dashboard(), base_url="http://127.0.0.1") as client:
        for page in (f"/jobs/{job.id}", "/jobs", "/jobs?state=failed", "/"):
            response = client.get(page)
            assert response.status_code == 200
            shown.append(response.text)
    app.close()
    for text in shown:
        for secret in SECRETS:
            assert secret not in text
    # Still shown: what is not secret, and that something is hidden.
    assert "visible-value" in shown[5] and '"ada"' in shown[5] and "•••" in shown[5]
    assert "visible-value" in shown[-4] and "•••" in shown[-4]  # the dashboard's job page


def due_command(url: str, *args: str) -> str:
    """`due --url URL ARGS...` in a process without the task's code (this
    checkout's due, where PYTHONPATH points to it)."""
    path = os.environ.get("PYTHONPATH")
    return run_due_in(None, "--url", url, *args, env={"PYTHONPATH": path} if path else None)


async def _run_until_failed(app: due.App, job_id: int) -> None:
    worker = Worker(app, WorkerSettings.build({"default": 1}, lease="10s", grace="1s"))
    running = asyncio.create_task(worker.run())
    try:
        await async_wait_until(
            lambda: app.get(job_id).state == due.JobState.FAILED, what="the job failed"
        )
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 10)


def test_a_job_of_an_unredacted_task_stores_nothing_more(app: due.App) -> None:
    @app.task(name="plain")
    def plain(user_id: int, note: str) -> None: ...

    job = app.get(plain.enqueue(42, "hello").id)
    assert job.redact == () and job.args == (42, "hello")


def test_a_refused_enqueue_does_not_repeat_a_redacted_value(app: due.App) -> None:
    @app.task(name="connect")
    def connect(password: str) -> None: ...

    with pytest.raises(due.ArgumentsError) as refused:
        app.enqueue("connect", args={"password": PASSWORD})  # type: ignore[arg-type]
    assert PASSWORD not in str(refused.value) and "•••" in str(refused.value)


def test_a_schedules_runs_store_what_they_hide(app: due.App) -> None:
    @app.task(name="rotate", redact=["key_id"])
    def rotate(key_id: str, password: str) -> None: ...

    app.schedule("rotation", every="1h", task=rotate, args=["k-1", PASSWORD])
    app.sync_schedules()
    run = app.trigger_schedule("rotation")
    assert run.args == ("k-1", PASSWORD)
    elsewhere = due.App(app.url)  # a process without the task's code
    assert shown_arguments(elsewhere.get(run.id), elsewhere)[0] == ["•••", "•••"]
    elsewhere.close()


def test_a_search_never_looks_inside_a_hidden_positional_argument(app: due.App) -> None:
    """A positional argument hidden whole (a `redact=` name, a default one)
    is not searched: a key inside it is no redacted name, but a search by it
    would list the job for the right guess only, and a bulk action by it
    would write the guess into the history."""

    @app.task(name="enrol", redact=["card"])
    def enrol(user: dict[str, str], card: dict[str, str], password: dict[str, str]) -> None: ...

    job = enrol.enqueue({"name": "ada"}, {"number": "4242", "cvc": "123"}, {"pin": "9911"})
    assert app.get(job.id).redact == ("card", 1, 2)  # the positions are stored
    # A job enqueued before the task hid its card (it stored no position):
    # hidden, and so not searched, where the task is registered with redact=.
    earlier = due.App(app.url, clock=app.clock)
    earlier.task(name="enrol")(lambda user, card, password: None)
    old = earlier.enqueue("enrol", args=[{"name": "bob"}, {"number": "4242"}, {}])
    earlier.close()

    for guess in ({"number": "4242"}, {"number": "4242", "cvc": "123"}, {"pin": "9911"}):
        for task in (None, "enrol"):
            assert app.jobs(task=task, args_contains=guess) == []
            for bulk in (app.cancel_many, app.retry_many):
                assert bulk(task=task, state=None, args_contains=guess, dry_run=True) == 0
        assert app.cancel_many(args_contains=guess, by="mallory") == 0
    assert app.get(job.id).state == app.get(old.id).state == due.JobState.QUEUED
    # What is shown is still searched: a visible positional argument, a keyword.
    assert [j.id for j in app.jobs(args_contains={"name": "ada"})] == [job.id]
    kept = enrol.enqueue({"name": "eve"}, card={"number": "4242"}, password={})
    assert [j.id for j in app.jobs(args_contains={"name": "eve"})] == [kept.id]
    assert app.jobs(args_contains={"number": "4242"}) == []
