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
from due.clock import FakeClock
from due.core.limits import shown_key
from due.core.records import ClaimRequest
from due.shown_arguments import shown_arguments
from due.visibility.alerts import evaluate
from due.visibility.snapshot import take
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


API_KEY = "sk-live-raw-5f1"  # a default name, given by position to a key function


def test_a_limit_key_computed_from_a_redacted_argument_is_shown_hidden(
    app: due.App, clock: FakeClock
) -> None:
    app.limit("per-key", concurrency=1)
    key = {"per-key": lambda account, api_key: f"{account}:{api_key}"}

    @app.task(name="call_api", limits=key)
    def call_api(account: str, api_key: str) -> None: ...

    app.sync_limits()
    first, waits = call_api.enqueue("acme", API_KEY), call_api.enqueue("acme", API_KEY)
    elsewhere = call_api.enqueue("zeta", "sk-other-key-22")
    app.store.job_claim(ClaimRequest("default", 10, "w", 600, limited=True))
    # One key for both: the second waits for the first, and the third runs.
    assert [app.get(j.id).state.value for j in (first, waits, elsewhere)] == [
        "running",
        "queued",
        "running",
    ]
    waiting = app.get(waits.id)
    assert waiting.limit_wait == "per-key" and API_KEY in (waiting.limit_wait_key or "")
    clock.advance("10m")
    alerts = [alert.line() for alert in evaluate(take(app), app.alert_rules())]
    shown = [repr(waiting), *alerts]
    for command in (["show", str(waits.id)], ["jobs"], ["status"], ["limit"]):
        shown += [due_command(app.url, *command), due_command(app.url, *command, "--json")]
    with TestClient(app.dashboard(), base_url="http://127.0.0.1") as client:
        shown += [client.get(page).text for page in ("/", f"/jobs/{waits.id}")]
    for text in shown:
        assert API_KEY not in text and "sk-other-key-22" not in text
    assert "limit_wait_key='•••'" in shown[0]
    assert any("waiting for limit per-key (key •••)" in alert for alert in alerts)
    assert "waiting for limit per-key (key •••)" in shown[-1]  # the dashboard's job page


def test_a_limit_key_refused_or_given_does_not_show_a_redacted_value(app: due.App) -> None:
    app.limit("per-key", concurrency=1)

    def refuse(account: str, password: str) -> str:
        raise KeyError(f"no account for {password}")

    @app.task(name="login", limits={"per-key": refuse})
    def login(account: str, password: str) -> None: ...

    @app.task(name="pay", redact=["card"], limits={"per-key": lambda card: card})
    def pay(card: int | str) -> None: ...

    for enqueue in (lambda: login.enqueue("ada", PASSWORD), lambda: pay.enqueue(4242424242)):
        with pytest.raises(due.InvalidJobError) as refused:
            enqueue()
        shown = messages(refused.value)
        assert PASSWORD not in shown and "4242424242" not in shown and "•••" in shown
    # A key given at the enqueue, or fixed by a schedule, is hidden alike.
    given = login.options(limit_keys={"per-key": f"ada/{PASSWORD}"}).enqueue("ada", PASSWORD)
    assert shown_key(app.get(given.id).limits[0][1]) == "•••"
    app.schedule("hourly", every="1h", task=pay, args=["4242424242"])
    app.sync_schedules()
    run = app.trigger_schedule("hourly")
    assert [shown_key(key) for _, key in app.get(run.id).limits] == ["•••"]


def messages(error: BaseException | None) -> str:
    """The messages of an error and of its causes and contexts (what a logged
    traceback would show of them, without the source lines)."""
    shown = []
    while error is not None:
        shown.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return "\n".join(shown)
