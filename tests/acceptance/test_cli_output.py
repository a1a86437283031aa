"""What the command prints, for people and for scripts."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

import due
from due.core.records import COUNT_LIMIT, WorkerRegistration
from due.testing import drain
from tests.helpers.cli import run_command, run_due

LONG_TASK = "reports.monthly." + "very_long_task_name_" * 5
LONG_ERROR = "the upstream service said no " * 12


@pytest.fixture
def jobs(backend_url: str) -> Iterator[dict[str, due.Job]]:
    """A database with a succeeded, a failed, a retrying and a delayed job."""
    run_due(backend_url, "migrate")
    with due.App(backend_url) as app:

        @app.task(name=LONG_TASK, queue="reports", retry=due.Retry(max_attempts=1))
        def monthly(month: str, *, final: bool | None = None) -> dict[str, Any]:
            if month == "bad":
                raise ValueError(LONG_ERROR)
            return {"month": month, "rows": [1, 2]}

        @app.task(name="flaky", queue="emails", retry=due.Retry(max_attempts=3, backoff="1h"))
        def flaky() -> None:
            raise ConnectionError("try later")

        made = {
            "succeeded": monthly.enqueue("2026-11", final=None),
            "failed": monthly.enqueue("bad"),
            "retrying": flaky.enqueue(),
        }
        drain(app)
        made["delayed"] = monthly.options(delay="2h", queue="later").enqueue("2026-12")
        yield {name: app.get(job.id) for name, job in made.items()}


def due_json(url: str, *args: str) -> Any:
    return json.loads(run_due(url, *args, "--json"))


def test_status_json_counts_failed_and_retrying_and_lists_ended_queues(
    backend_url: str, jobs: dict[str, due.Job]
) -> None:
    status = due_json(backend_url, "status")
    queues = {queue["name"]: queue for queue in status["queues"]}
    assert set(queues) == {"reports", "emails", "later"}
    assert queues["reports"]["failed"] == 1 and queues["reports"]["queued"] == 0
    assert queues["emails"]["retrying"] == 1 and queues["emails"]["due"] == 0
    assert queues["later"]["queued"] == 1 and queues["later"]["oldest_due_at"] is None
    assert set(queues["later"]) == {
        "name",
        "queued",
        "due",
        "running",
        "waiting",
        "retrying",
        "failed",
        "stuck",
        "oldest_due_at",
        "oldest_due_age_seconds",
        "paused",
        "scheduled",
        "at_least",
        "live_workers",
    }
    assert queues["later"]["scheduled"] == 1 and queues["later"]["live_workers"] == 0
    assert queues["later"]["at_least"] == []
    assert status["active_jobs"] == [] and dt.datetime.fromisoformat(status["now"]).tzinfo


def test_status_table_shows_failed_and_retrying(backend_url: str, jobs: dict[str, due.Job]) -> None:
    lines = run_due(backend_url, "status").splitlines()
    header = next(line for line in lines if "queue" in line)
    assert "retrying" in header and "failed" in header
    reports = next(line for line in lines if "│ reports" in line)
    assert [cell.strip() for cell in reports.split("│")[1:8]] == [
        "reports",
        "0",
        "0",
        "0",
        "0",
        "0",
        "1",
    ]


def table_cells(line: str) -> list[str]:
    """The cells of one line of a table as rich draws it (header or row)."""
    return [cell.strip() for cell in re.split("[│┃]", line)[1:-1]]


def test_every_column_of_status_has_a_header(backend_url: str) -> None:
    """A paused queue says so under a `paused` header, and the progress count of
    a running or waiting job under `done` (both columns had none)."""
    run_due(backend_url, "migrate")
    with due.App(backend_url) as app:

        @app.task(name="chunk", queue="bulk")
        def chunk(n: int) -> None: ...

        app.batch(chunk, [(n,) for n in range(3)])
        app.pause_queue("bulk")
    lines = run_due(backend_url, "status").splitlines()
    headers = [table_cells(line) for line in lines if line.startswith("┃")]
    assert len(headers) == 2 and all(all(cells) for cells in headers), headers
    queues, active = headers
    (bulk,) = [
        dict(zip(queues, table_cells(line), strict=True)) for line in lines if "│ bulk" in line
    ]
    assert bulk["paused"] == "yes" and bulk["queued"] == "3"
    (parent,) = [
        dict(zip(active, table_cells(line), strict=True)) for line in lines if "due.batch" in line
    ]
    assert parent["state"] == "waiting" and parent["done"] == "0/3"


def test_a_count_past_its_limit_reads_at_least(backend_url: str) -> None:
    """README: each count stops at 10,000 and then reads 10000+ (the age of the
    oldest due job stays exact)."""
    run_due(backend_url, "migrate")
    with due.App(backend_url) as app:

        @app.task(name="nightly", queue="bulk")
        def nightly() -> None: ...

        app.enqueue_many([nightly.options(delay="2h").request()] * (COUNT_LIMIT + 1))
    bulk = next(line for line in run_due(backend_url, "status").splitlines() if "│ bulk" in line)
    assert [cell.strip() for cell in bulk.split("│")[1:4]] == ["bulk", f"{COUNT_LIMIT}+", "0"]
    (queue,) = due_json(backend_url, "status")["queues"]
    assert (queue["scheduled"], queue["at_least"]) == (COUNT_LIMIT, ["queued", "scheduled"])


def test_jobs_and_show_json(backend_url: str, jobs: dict[str, due.Job]) -> None:
    listed = due_json(backend_url, "jobs")["jobs"]
    assert [job["id"] for job in listed] == sorted((j.id for j in jobs.values()), reverse=True)
    shown = due_json(backend_url, "show", str(jobs["succeeded"].id))["job"]
    assert shown == next(job for job in listed if job["id"] == jobs["succeeded"].id)
    assert shown["args"] == ["2026-11"] and shown["kwargs"] == {"final": None}
    assert shown["result"] == {"month": "2026-11", "rows": [1, 2]}
    assert shown["state"] == "succeeded" and shown["finished_at"].endswith("+00:00")
    failed = due_json(backend_url, "show", str(jobs["failed"].id))["job"]
    (attempt,) = failed["errors"]
    assert attempt["kind"] == "error" and LONG_ERROR.strip() in attempt["error"]
    assert "Traceback (most recent call last)" in attempt["traceback"]


def test_schedules_and_workers_json(backend_url: str) -> None:
    run_due(backend_url, "migrate")
    with due.App(backend_url) as app:

        @app.task(name="tally")
        def tally() -> None: ...

        app.add_schedule("tally", "*/5 * * * *", task=tally, tz="Europe/Paris")
        app.store.worker_register(WorkerRegistration("web-1:42:ab", "web-1", 42, {"emails": 16}))
    (schedule,) = due_json(backend_url, "schedules")["schedules"]
    assert schedule["name"] == "tally" and schedule["cron"] == "*/5 * * * *"
    assert schedule["tz"] == "Europe/Paris" and schedule["overlap"] == "forbid"
    assert schedule["next_run_at"] is not None and schedule["skipped"] == 0
    (worker,) = due_json(backend_url, "workers")["workers"]
    assert worker == {
        "id": "web-1:42:ab",
        "host": "web-1",
        "pid": 42,
        "state": "running",
        "queues": {"emails": 16},
        "running": 0,
        "tasks": [],
        "started_at": worker["started_at"],
        "last_seen_at": worker["last_seen_at"],
        "stopped_at": None,
    }


def test_without_a_terminal_nothing_is_cut(backend_url: str, jobs: dict[str, due.Job]) -> None:
    done = run_command(None, "--url", backend_url, "jobs", env={"COLUMNS": "40"})
    assert done.returncode == 0, done.stderr
    assert LONG_TASK in done.stdout and LONG_ERROR.strip() in done.stdout
    assert "…" not in done.stdout
    assert " UTC" in done.stdout  # times show their zone


def test_in_a_narrow_terminal_columns_drop_and_cells_wrap(
    backend_url: str, jobs: dict[str, due.Job]
) -> None:
    terminal = {"TTY_COMPATIBLE": "1", "NO_COLOR": "1", "COLUMNS": "70"}
    done = run_command(None, "--url", backend_url, "jobs", env=terminal)
    assert done.returncode == 0, done.stderr
    lines = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout).splitlines()  # styles, not text
    assert max(len(line) for line in lines) <= 70, done.stdout
    assert "last error" not in lines[1] and "run at" not in lines[1]  # low value, dropped
    assert "id" in lines[1] and "task" in lines[1] and "state" in lines[1]
    assert "…" not in done.stdout
    folded = "".join(line.split("│")[2].strip() for line in lines if line.count("│") > 3)
    assert LONG_TASK in folded  # wrapped over lines, not cut


def test_show_prints_json_values_and_the_traceback_as_raised(
    backend_url: str, jobs: dict[str, due.Job]
) -> None:
    shown = run_command(
        None, "--url", backend_url, "show", str(jobs["succeeded"].id), env={"COLUMNS": "40"}
    ).stdout
    assert '["2026-11"]' in shown and '{"final": null}' in shown
    result = next(line for line in shown.splitlines() if line.strip().startswith("result"))
    assert json.loads(result.strip().removeprefix("result")) == {"month": "2026-11", "rows": [1, 2]}
    failed = run_command(
        None, "--url", backend_url, "show", str(jobs["failed"].id), env={"COLUMNS": "40"}
    ).stdout
    traceback = jobs["failed"].errors[0].traceback
    assert traceback is not None and traceback.strip() in failed


def test_retry_keeps_a_delayed_jobs_time_unless_now(
    backend_url: str, jobs: dict[str, due.Job]
) -> None:
    delayed = jobs["delayed"]
    run_due(backend_url, "cancel", str(delayed.id))
    said = run_due(backend_url, "retry", str(delayed.id))
    with due.App(backend_url) as app:
        assert app.get(delayed.id).run_at == delayed.run_at
        assert delayed.run_at.strftime("%Y-%m-%d %H:%M:%S UTC") in said
        run_due(backend_url, "cancel", str(delayed.id))
        run_due(backend_url, "retry", "--now", str(delayed.id))
        retried = app.get(delayed.id)
        assert retried.state == due.JobState.QUEUED and retried.run_at < delayed.run_at
        failed = jobs["failed"]
        run_due(backend_url, "retry", str(failed.id))
        assert app.get(failed.id).run_at > failed.run_at  # a failed job is due now


# A terminal's control sequences in a task's error: a clipboard write (OSC 52,
# ended by BEL or by ST), a colour (CSI), the same CSI as one C1 character,
# a carriage return that would overwrite the line, a title change.
CONTROLS = (
    "\x1b]52;c;ZWNobyBwd25lZA==\x07 \x1b]52;c;eA==\x1b\\ \x1b[31mred \x9b31m\rover \x1b]0;t\x07"
)


@pytest.mark.parametrize("terminal", [{}, {"TTY_COMPATIBLE": "1"}], ids=["pipe", "terminal"])
def test_a_tasks_error_cannot_write_to_the_terminal(
    backend_url: str, terminal: dict[str, str]
) -> None:
    run_due(backend_url, "migrate")
    with due.App(backend_url) as app:

        @app.task(name=f"hostile{CONTROLS}", retry=due.Retry(max_attempts=1))
        def hostile(note: str) -> None:
            raise ValueError(f"refused {note}")

        job = hostile.enqueue(CONTROLS)
        drain(app)
    printed = []
    for command in (["show", str(job.id)], ["jobs"], ["show", str(job.id), "--json"]):
        done = run_command(None, "--url", backend_url, *command, env=terminal)
        assert done.returncode == 0, done.stderr
        printed.append(done.stdout)
    for text in printed:
        styles = re.sub(r"\x1b\[[0-9;]*m", "", text)  # due's own colours, in a terminal
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", styles), repr(text)
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in printed[0]  # shown, harmless
    assert json.loads(printed[2])["job"]["last_error"].startswith("ValueError: refused \x1b]52")
