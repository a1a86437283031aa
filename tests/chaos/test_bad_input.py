"""Bad input meets a running deployment: each bad thing fails alone, clearly.

A row corrupted outside due (not JSON, or JSON of the wrong shape) fails that
job with the reason and runs the others; arguments exactly at the size limit
run and one byte more is refused at the call; names with quotes, semicolons
and unicode are stored and run as they are (queue names, which workers are
told on the command line, are refused with the rule instead); a burst of jobs
enqueued while workers run is run, each once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import due
from due import JobState
from tests.apps import odd_names_app
from tests.helpers.cli import run_due
from tests.helpers.database import plain_transaction
from tests.helpers.waiting import wait_until
from tests.helpers.workers import Workers

pytestmark = pytest.mark.slow
ODD_APP = "tests.apps.odd_names_app:app"


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    application = due.App(backend_url, max_payload_bytes=odd_names_app.app.max_payload_bytes)
    application.migrate()
    for task in odd_names_app.app.tasks:
        application.tasks.add(due.Task(application, task.fn, task.name, task.config))
    yield application
    application.close()


def ended(app: due.App, ids: list[int]) -> bool:
    return all(app.get(job_id).is_final for job_id in ids)


def corrupt(url: str, job_id: int, payload: str) -> None:
    sqlite = url.startswith("sqlite")
    with plain_transaction(url) as conn:
        conn.execute(
            "UPDATE due_jobs SET payload = "
            + ("?" if sqlite else "%s::jsonb")
            + " WHERE id = "
            + ("?" if sqlite else "%s"),
            (payload, job_id),
        )


def test_bad_rows_and_odd_names_fail_alone(
    app: due.App, workers: Workers, backend_url: str
) -> None:
    echo = app.tasks.get("echo")
    good = [echo.enqueue("x" * n) for n in range(5)]
    not_json = echo.enqueue("broken")
    wrong_shape = echo.enqueue("broken too")
    if backend_url.startswith("sqlite"):
        corrupt(backend_url, not_json.id, "{not json")
    else:  # jsonb holds only JSON: a value of the wrong shape instead
        corrupt(backend_url, not_json.id, '"just a string"')
    corrupt(backend_url, wrong_shape.id, '{"args": "not a list", "kwargs": {}}')
    quoted = app.tasks.get(odd_names_app.QUOTED).options(key="k'; --✓").enqueue("a'b;c")
    again = app.tasks.get(odd_names_app.QUOTED).options(key="k'; --✓").enqueue("a'b;c")
    named = app.tasks.get(odd_names_app.UNICODE).enqueue("日本語")
    limit = app.max_payload_bytes
    room = limit - len(json.dumps({"args": [""], "kwargs": {}}, separators=(",", ":")))
    at_limit = echo.enqueue("y" * room)
    with pytest.raises(due.PayloadError, match="over the limit"):
        echo.enqueue("y" * (room + 1))
    with pytest.raises(due.InvalidJobError, match="may hold only letters"):
        echo.options(queue="it's; --").enqueue("z")
    ids = [j.id for j in [*good, not_json, wrong_shape, quoted, named, at_limit]]
    worker = workers.start("--app", ODD_APP, app=ODD_APP)
    workers.wait_ready(worker)
    wait_until(lambda: ended(app, ids), timeout=60, what="every job to end")
    assert again.deduplicated and again.id == quoted.id
    assert [app.get(j.id).result for j in good] == [0, 1, 2, 3, 4]
    for broken in (not_json, wrong_shape):
        failed = app.get(broken.id)
        assert failed.state == JobState.FAILED
        assert "its stored arguments could not be read" in (failed.last_error or "")
    assert app.get(quoted.id).result == "a'b;c"
    assert app.get(named.id).result == "語本日"
    assert app.get(at_limit.id).result == room
    shown = run_due(backend_url, "show", str(not_json.id))  # inspection never chokes on it
    assert "could not be read" in shown
    assert len(app.jobs(limit=100)) == len(ids)  # the refused calls wrote nothing


def test_a_burst_enqueued_while_workers_run_is_run_once_each(
    app: due.App, workers: Workers
) -> None:
    running = [workers.start("--app", ODD_APP, app=ODD_APP) for _ in range(2)]
    for worker in running:
        workers.wait_ready(worker)
    echo = app.tasks.get("echo")
    burst = 20_000
    jobs = app.enqueue_many([echo.request(str(n)) for n in range(burst)])
    assert len({job.id for job in jobs}) == burst
    wait_until(
        lambda: len(app.jobs(state="succeeded", limit=burst + 1)) == burst,
        timeout=120,
        what="the burst to run",
    )
    done = app.jobs(state="succeeded", limit=burst + 1)
    assert all(job.attempt == 1 for job in done)  # each ran once
    assert not app.jobs(state="queued") and not app.jobs(state="running")
