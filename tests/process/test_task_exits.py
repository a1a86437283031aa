"""A task's exit fails its attempt, never its worker (invariant 17).

A handler that calls `sys.exit()` (or a command-line parser fed bad input, which
exits with code 2), raises `KeyboardInterrupt` itself, or meets a
`CancelledError` nobody asked for, ends that attempt failed with its traceback;
the worker goes on, and the jobs it runs beside it end once. A real Ctrl-C of
the worker still stops it.
"""

from __future__ import annotations

import signal

import pytest

import due
from due import JobState
from tests.helpers.waiting import wait_until
from tests.helpers.workers import Workers

pytestmark = pytest.mark.slow

HIDDEN = "hunter2-s3cr3t"
EXITS = {
    "exits": ("SystemExit", {"password": HIDDEN}),
    "async_exits": ("SystemExit", {"password": HIDDEN}),
    "interrupts": ("KeyboardInterrupt", {}),
    "async_interrupts": ("KeyboardInterrupt", {}),
    "parses_arguments": ("SystemExit", {"argv": ["--year", "2026"]}),
    "async_cancels_itself": ("CancelledError", {}),
}


def test_a_task_that_exits_fails_alone_and_the_worker_goes_on(
    app: due.App, workers: Workers
) -> None:
    worker = workers.start("-q", "default=8")
    workers.wait_ready(worker)
    innocent = app.enqueue("work", kwargs={"seconds": 2})
    wait_until(
        lambda: any(line.job == innocent.id for line in workers.ledger_lines()),
        what="the innocent job to start",
    )
    exiting = {name: app.enqueue(name, kwargs=kwargs).id for name, (_, kwargs) in EXITS.items()}

    def ended() -> bool:
        return all(app.get(job_id).is_final for job_id in exiting.values())

    wait_until(ended, timeout=30, what="every exiting job to end")
    for name, job_id in exiting.items():
        job = app.get(job_id)
        kind = EXITS[name][0]
        assert job.state == JobState.FAILED, (name, job.state, worker.log())
        assert job.attempt == 1, name
        error = job.errors[-1]
        assert (error.exception or "").endswith(kind), (name, error)
        assert kind in (error.traceback or ""), (name, error.traceback)
    assert "cannot log in with •••" in (app.get(exiting["exits"]).last_error or "")
    assert app.get(exiting["parses_arguments"]).last_error == "SystemExit: 2"

    wait_until(
        lambda: app.get(innocent.id).state == JobState.SUCCEEDED,
        timeout=30,
        what="the innocent job to succeed",
    )
    starts = [line for line in workers.ledger_lines() if line.job == innocent.id]
    assert [line.kind for line in starts] == ["start", "end"], starts  # once, never again
    assert worker.process.poll() is None, worker.log()
    after = app.enqueue("work")
    wait_until(
        lambda: app.get(after.id).state == JobState.SUCCEEDED,
        timeout=30,
        what="the worker to take new work",
    )
    assert HIDDEN not in worker.log()

    worker.signal(signal.SIGINT)  # a real Ctrl-C still stops the worker
    assert worker.wait_exit(timeout=30) == 0, worker.log()
