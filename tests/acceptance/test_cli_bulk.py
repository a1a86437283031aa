"""`due retry` and `due cancel` given a filter, run as a user runs them: the
count and a sample first, the action only with --yes or a yes at the prompt
of a terminal, --dry-run only counting."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

import due
from due.core.jobs import AttemptError, JobState
from due.core.records import ClaimRequest, Completion
from tests.helpers.cli import PLAIN_ENVIRONMENT, run_due_in
from tests.helpers.workers import REPOSITORY

SOURCE = {"PYTHONPATH": str(REPOSITORY / "src")}
"""The code of this checkout (in a checkout the package is installed from, the same)."""


def run_due(url: str, *args: str, expect: int = 0) -> str:
    return run_due_in(None, "--url", url, *args, expect=expect, env=SOURCE)


FILTER = ["--task", "charge", "--error-contains", "TimeoutError", "--since", "1h"]


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    """30 jobs of `charge`: 10 failed with a TimeoutError, 10 with a ValueError, 10 queued."""
    application = due.App(backend_url)
    application.migrate()

    @application.task(name="charge", queue="billing", retry=due.Retry(max_attempts=1))
    def charge(n: int) -> None: ...

    application.enqueue_many([charge.request(n) for n in range(30)])
    claimed = application.store.job_claim(ClaimRequest("billing", 20, "w", 30))
    now = application.store.now()
    errors = ["TimeoutError: the bank did not answer", "ValueError: bad card"]
    ends = [
        Completion(
            j.id, j.lease_token, JobState.FAILED, error=AttemptError(1, errors[n % 2], None, now)
        )
        for n, j in enumerate(claimed)
    ]
    application.store.job_complete(ends)
    yield application
    application.close()


def failed(app: due.App) -> int:
    return len(app.jobs(state="failed", error_contains="TimeoutError"))


def test_a_dry_run_counts_and_shows_a_sample_and_changes_nothing(
    app: due.App, backend_url: str
) -> None:
    said = run_due(backend_url, "retry", *FILTER, "--dry-run")
    assert "10 jobs to retry match" in said and "and 5 more" in said
    assert said.count("TimeoutError: the bank did not answer") == 5 and "ValueError" not in said
    assert failed(app) == 10
    # `due jobs` with the same filter lists the same jobs.
    listed = run_due(backend_url, "jobs", *FILTER, "--state", "failed")
    assert listed.count("TimeoutError: the bank did not answer") == 10


def test_without_yes_and_without_a_terminal_nothing_is_done(app: due.App, backend_url: str) -> None:
    said = run_due(backend_url, "retry", *FILTER, expect=1)
    assert "10 jobs to retry match" in said and "error: give --yes to retry them" in said
    assert failed(app) == 10
    assert app.history() == []


def test_yes_acts_and_records_one_action_and_again_finds_nothing(
    app: due.App, backend_url: str
) -> None:
    assert "10 jobs retried" in run_due(backend_url, "retry", *FILTER, "--yes")
    assert failed(app) == 0 and len(app.jobs(state="queued")) == 20
    assert "no job to retry matches" in run_due(backend_url, "retry", *FILTER, "--yes")
    (action,) = app.history()  # nothing matched the second time: nothing done
    assert action.action.startswith("retry 10 jobs where task=charge state=failed since=")
    assert action.action.endswith(" error_contains=TimeoutError")
    assert action.by.startswith("cli:")
    said = run_due(backend_url, "cancel", "--queue", "billing", "-y")
    assert "20 jobs to cancel match" in said and "20 jobs cancelled or asked to stop" in said
    assert len(app.jobs(state="cancelled")) == 20


def at_a_terminal(url: str, answer: str, *args: str) -> tuple[int, str]:
    """`due ARGS...` with its standard input on a terminal that answers `answer`."""
    main, other = os.openpty()
    try:
        os.write(main, answer.encode() + b"\n")
        done = subprocess.run(
            [sys.executable, "-m", "due", "--url", url, *args],
            stdin=other,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPOSITORY,
            env={**PLAIN_ENVIRONMENT, **SOURCE},
        )
    finally:
        os.close(main)
        os.close(other)
    return done.returncode, done.stdout + done.stderr


def test_at_a_terminal_it_asks_first(app: due.App, backend_url: str) -> None:
    code, said = at_a_terminal(backend_url, "n", "cancel", "--state", "queued")
    assert code == 1 and "Cancel 10 jobs? [y/N]" in said and "Aborted" in said
    assert len(app.jobs(state="queued")) == 10
    code, said = at_a_terminal(backend_url, "y", "cancel", "--state", "queued")
    assert code == 0 and "10 jobs cancelled or asked to stop" in said
    assert app.jobs(state="queued") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["retry"], "give the ids of the jobs to retry, or a filter"),
        (["cancel", "1", "--task", "charge"], "give job ids or a filter to cancel, not both"),
        (["retry", "1", "--yes"], "--yes and --dry-run go with a filter"),
        (["cancel", "--state", "failed"], "Invalid value for '-s' / '--state'"),
    ],
)
def test_a_command_line_that_says_neither_or_both_does_not_parse(
    app: due.App, backend_url: str, args: list[str], message: str
) -> None:
    assert message in run_due(backend_url, *args, expect=2)


def test_a_bad_time_is_refused_naming_the_option(app: due.App, backend_url: str) -> None:
    said = run_due(backend_url, "retry", "--since", "10:02", "--dry-run", expect=1)
    assert "error: since: '10:02' is neither a duration before now" in said


def test_several_ids_still_act_one_by_one(app: due.App, backend_url: str) -> None:
    first, second = (job.id for job in app.jobs(state="queued", limit=2))
    said = run_due(backend_url, "cancel", str(first), str(second))
    assert f"job {first} is cancelled" in said and f"job {second} is cancelled" in said
    assert app.get(first).state == app.get(second).state == JobState.CANCELLED


def test_jobs_are_found_and_cancelled_by_their_arguments(app: due.App, backend_url: str) -> None:
    job = app.enqueue_many([app.tasks.get("charge").request(n=4242)])[0]
    listed = run_due(backend_url, "jobs", "--args-contains", '{"n": 4242}')
    assert f"│ {job.id} │" in listed and listed.count("charge") == 1
    said = run_due(backend_url, "cancel", "--args-contains", '{"n": 4242}', "--yes")
    assert "1 job to cancel matches" in said and app.get(job.id).state == JobState.CANCELLED
    refused = run_due(backend_url, "jobs", "--args-contains", "[4242]", expect=1)
    assert "error: args_contains must be a JSON object" in refused


@pytest.mark.parametrize("command", [["jobs"], ["retry", "--yes"], ["cancel", "--dry-run"]])
def test_a_search_by_a_redacted_name_is_refused(
    app: due.App, backend_url: str, command: list[str]
) -> None:
    """Its value is shown as •••: a search by it would confirm a guessed secret."""
    searched = '{"user": {"Token": "abc123"}}'
    said = run_due(backend_url, *command, "--args-contains", searched, expect=1)
    assert "error: args_contains cannot search by 'Token': due.DEFAULT_REDACT redacts it" in said
    assert app.history() == []
