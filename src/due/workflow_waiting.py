"""Waiting for a workflow to end: `app.wait_workflow(id, timeout=...)`.

A workflow ends with its last step, in the transaction that records that
step's end, so the wait is a wait for its unfinished steps, one after the
other (each on the job waiter: woken by their ends, no polling), then a read
of the workflow again. Its deadline is real seconds, as the job waiter's (a
FakeClock does not end a wait sooner, nor make it last for ever), and it is
checked before every wait.

A read may find every step ended while the workflow still says it runs: a
step that ended between the read of the workflow's row and that of its steps,
or (never, by invariant 18; a database damaged by hand, say) counts that
disagree with the steps. Then there is no step to wait for: the workflow is
read again after a pause, never in a loop that spins, and the timeout says
which it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from due.clock import SystemClock
from due.workflows import WorkflowStatus

STATUS_PACE = 0.25
"""Seconds between two reads of a workflow whose steps have all ended while it
still says it runs."""
_REAL_CLOCK = SystemClock()


def wait_ended(
    workflow_id: int,
    read: Callable[[], WorkflowStatus],
    wait_job: Callable[[int, float | None], object],
    limit: float | None,
) -> WorkflowStatus:
    """The workflow once it has ended (`read` gives it as stored now;
    `wait_job(job_id, seconds)` returns once that job has ended, or raises
    TimeoutError); TimeoutError, naming what it waits for, after `limit`
    seconds (None: no limit)."""
    deadline = None if limit is None else _REAL_CLOCK.monotonic() + limit
    pause = threading.Event()
    status = read()
    while not status.ended:
        unfinished = [step for step in status.steps.values() if not step.state.is_final]
        for step in unfinished:
            try:
                wait_job(step.job_id, _left(deadline))
            except TimeoutError:
                status = read()
                if status.ended:  # (it ended as the wait ran out)
                    return status
                raise _timed_out(workflow_id, status, limit) from None
        if not unfinished:
            left = _left(deadline)
            if left is not None and left <= 0:
                raise _timed_out(workflow_id, status, limit)
            pause.wait(STATUS_PACE if left is None else min(STATUS_PACE, left))
        status = read()
    return status


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - _REAL_CLOCK.monotonic())


def _timed_out(workflow_id: int, status: WorkflowStatus, limit: float | None) -> TimeoutError:
    within = f"within {limit:g}s"
    for step in status.steps.values():
        if not step.state.is_final:
            return TimeoutError(
                f"workflow {workflow_id} has not ended {within}: step {step.name!r} is "
                f"{step.state.value}"
            )
    return TimeoutError(
        f"workflow {workflow_id} has not ended {within}: every step has ended, yet it "
        f"still says it runs ({status.steps_ended} of {status.steps_total} steps counted "
        "as ended); app.stuck_workflows() and `due check` report it"
    )
