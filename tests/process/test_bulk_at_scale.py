"""Bulk retry and cancel at the scale of issue 41, as an operator runs them:
`due retry|cancel <filter> --yes` in a process of its own, on 20,000
matching jobs, while a real worker runs other jobs of the same queue and of
another, cut off after its first batches have committed (SIGINT, SIGKILL) and
run again. Each job is acted on once, none is missed, and the jobs acted on
are exactly those `due jobs --json` lists with the same filter."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence

import pytest

import due
from due import JobState
from due.core.jobs import AttemptError
from due.core.records import ClaimRequest, Completion
from tests.helpers.database import rows
from tests.helpers.waiting import wait_until
from tests.helpers.workers import LEDGER_APP, REPOSITORY, Workers

pytestmark = pytest.mark.slow

MATCHING = 20_000
"""Ten batches of the default 2,000."""
ALL = 1_000_000
TIMEOUT = "TimeoutError: the bank did not answer"


def due_command(url: str, *args: str) -> subprocess.Popen[str]:
    """`due --app <the ledger app> ARGS...` as an operator runs it, not waited for."""
    environment = {
        **os.environ,
        "DUE_DATABASE_URL": url,
        "COLUMNS": "200",
        "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "due", "--app", LEDGER_APP, *args],
        env=environment,
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(command: subprocess.Popen[str], expect: int = 0) -> str:
    output, _ = command.communicate(timeout=300)
    assert command.returncode == expect, output
    return output


def listed(url: str, *filters: str) -> set[int]:
    """The ids `due jobs <filters> --json` lists (all of them: one page as big as the table)."""
    output = finished(due_command(url, "jobs", *filters, "--limit", str(ALL), "--json"))
    return {job["id"] for job in json.loads(output)["jobs"]}


def count(url: str, where: str) -> int:
    """How many of the table's jobs `where` (SQL) holds for, read outside due."""
    return int(rows(url, f"SELECT count(*) FROM due_jobs WHERE {where}")[0][0])


def fail_all(app: due.App, queue: str, error: str) -> None:
    """Claim every due job of `queue` and fail it with `error`, as a worker would."""
    now = app.store.now()
    while claimed := app.store.job_claim(ClaimRequest(queue, 2000, "setup", 60)):
        app.store.job_complete(
            [
                Completion(
                    job.id,
                    job.lease_token,
                    JobState.FAILED,
                    error=AttemptError(1, error, None, now),
                )
                for job in claimed
            ]
        )


def starts(workers: Workers, task_ids: Sequence[int] | set[int]) -> Counter[int]:
    wanted = set(task_ids)
    return Counter(
        line.job for line in workers.ledger_lines() if line.kind == "start" and line.job in wanted
    )


def keep_busy(app: due.App) -> None:
    """Other work for the worker, on the queue the bulk action's jobs are in and on another."""
    work, email = app.tasks.get("work"), app.tasks.get("email")
    app.enqueue_many([work.request(seconds=0.002) for _ in range(1500)])
    app.enqueue_many([email.request() for _ in range(1500)])


def test_a_retry_of_20000_jobs_cut_off_by_sigint_and_run_again_retries_each_once(
    app: due.App, workers: Workers, backend_url: str
) -> None:
    charge, work = app.tasks.get("charge"), app.tasks.get("work")
    app.enqueue_many([charge.request(n) for n in range(MATCHING)])
    fail_all(app, "default", TIMEOUT)
    app.enqueue_many([charge.request(n) for n in range(1000)])
    fail_all(app, "default", "ValueError: bad card")  # another error: not matched
    app.enqueue_many([work.request() for _ in range(500)])
    fail_all(app, "default", TIMEOUT)  # another task: not matched
    # The filter pins the jobs that failed before now: a retried job that
    # fails again (the bank is still down) is not retried again by the run
    # that finishes the first (as an operator gives --until the first run's time).
    until = app.store.now().isoformat()
    where = ("--task", "charge", "--error-contains", "TimeoutError", "--until", until)
    expected = listed(backend_url, *where, "--state", "failed")
    assert len(expected) == MATCHING

    keep_busy(app)
    worker = workers.start("-q", "default=4", "-q", "emails=2")
    workers.wait_ready(worker)
    first = due_command(backend_url, "retry", *where, "--yes")
    # Two batches committed (jobs put back; the worker may have run some of
    # them since), not a sleep: then the operator presses Ctrl-C.
    wait_until(
        lambda: (
            count(backend_url, "task = 'charge' AND state <> 'failed'") >= 4000
            or first.poll() is not None
        ),
        timeout=180,
        every=0.01,
        what="two batches of the retry to commit",
    )
    first.send_signal(signal.SIGINT)
    first_output = finished(first, expect=1)
    assert "Aborted" in first_output
    (cut_off,) = app.history()
    done_first = int(re.fullmatch(r"retry (\d+) jobs where .*", cut_off.action)[1])  # type: ignore[index]
    assert 4000 <= done_first < MATCHING, first_output

    second = finished(due_command(backend_url, "retry", *where, "--yes"))
    assert f"{MATCHING - done_first} jobs retried" in second, second
    assert (
        app.retry_many(task="charge", error_contains="TimeoutError", until=until, dry_run=True) == 0
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(60) == 0

    # Each job listed was retried once, and no other: a job retried is queued
    # still (attempt 0, never run) or ran once since and failed again; a job
    # retried twice would have run twice or be queued after a run.
    ran = starts(workers, expected)
    assert max(ran.values(), default=1) == 1
    by_state = _ids_by_state_and_attempt(app, "charge")
    retried_not_run = by_state.get((JobState.QUEUED, 0), set())
    ran_and_failed_again = {
        job_id for job_id in by_state.get((JobState.FAILED, 1), set()) if ran[job_id]
    }
    assert retried_not_run | ran_and_failed_again == expected  # none missed, no other
    assert not retried_not_run & set(ran)
    assert ran_and_failed_again == set(ran)
    assert ran, "the worker should have run some of the retried jobs meanwhile"
    untouched = by_state[(JobState.FAILED, 1)] - ran_and_failed_again
    assert len(untouched) == 1000 and not untouched & expected
    assert count(backend_url, "task = 'work' AND state = 'failed'") == 500
    assert [a.action.split(" where ")[0] for a in app.history()] == [
        f"retry {done_first} jobs",
        f"retry {MATCHING - done_first} jobs",
    ]
    # The other work ran on meanwhile, each job once.
    busy = Counter(
        line.job
        for line in workers.ledger_lines()
        if line.kind == "start" and line.job not in expected
    )
    assert busy and max(busy.values()) == 1


def _ids_by_state_and_attempt(app: due.App, task: str) -> dict[tuple[JobState, int], set[int]]:
    groups: dict[tuple[JobState, int], set[int]] = {}
    for job in app.jobs(task=task, limit=ALL):
        groups.setdefault((job.state, job.attempt), set()).add(job.id)
    return groups


def test_a_cancel_of_20000_jobs_cut_off_by_sigkill_and_run_again_cancels_each_once(
    app: due.App, workers: Workers, backend_url: str
) -> None:
    cancellable, work = app.tasks.get("cancellable"), app.tasks.get("work")
    app.enqueue_many(
        [cancellable.options(delay="1h", key=f"acct-{n}").request() for n in range(MATCHING)]
    )
    app.enqueue_many(
        [cancellable.options(delay="1h", key=f"other-{n}").request() for n in range(500)]
    )
    app.enqueue_many([work.options(delay="1h", key=f"acct-w{n}").request() for n in range(500)])
    running = [cancellable.options(key=f"acct-now-{n}").enqueue() for n in range(3)]
    where = ("--task", "cancellable", "--key-prefix", "acct-")

    keep_busy(app)
    worker = workers.start("-q", "default=5", "-q", "emails=2")
    workers.wait_ready(worker)
    wait_until(lambda: len(starts(workers, [job.id for job in running])) == 3, what="three to run")
    expected = listed(backend_url, *where)
    assert len(expected) == MATCHING + 3

    first = due_command(backend_url, "cancel", *where, "--yes")
    wait_until(
        lambda: count(backend_url, "state = 'cancelled'") >= 4000 or first.poll() is not None,
        timeout=180,
        every=0.01,
        what="two batches of the cancel to commit",
    )
    first.kill()  # SIGKILL: the batch in flight is lost with the process
    finished(first, expect=-signal.SIGKILL)
    done_first = count(backend_url, "state = 'cancelled'")
    assert 4000 <= done_first < MATCHING, "cut off half way"
    assert app.history() == []  # killed: it could record nothing

    second = finished(due_command(backend_url, "cancel", *where, "--yes"))
    assert f"{MATCHING + 3 - done_first} jobs cancelled or asked to stop" in second, second
    # Asked already, the running ones are passed over: nothing is touched twice.
    assert app.cancel_many(task="cancellable", key_prefix="acct-", dry_run=True) == 0
    for job in running:
        assert app.wait(job.id, timeout=60).state == JobState.CANCELLED
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(60) == 0

    acted = {job.id for job in app.jobs(state="cancelled", limit=ALL)}
    assert acted == expected
    assert len(app.jobs(task="cancellable", state="queued", limit=ALL)) == 500
    assert len(app.jobs(task="work", state="queued", limit=ALL)) == 500
    assert set(starts(workers, expected)) == {job.id for job in running}  # each once
    busy = Counter(line.job for line in workers.ledger_lines() if line.kind == "start")
    assert max(busy.values()) == 1 and len(busy) > 3
