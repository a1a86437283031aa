"""`app.wait_workflow` honours its timeout and reads the workflow at a pace,
whatever the workflow's row says, on real stores (the app's clock is a
FakeClock, which does not move: a wait's deadline is real seconds)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import due
from due.testing import drain
from due.workflow_waiting import STATUS_PACE
from tests.helpers.database import plain_transaction

TIMEOUT = 1.0


@pytest.fixture
def step(app: due.App) -> due.Task:
    @app.task(name="step")
    def step() -> None: ...

    return step


def waited(app: due.App, workflow: int, timeout: str) -> tuple[Any, float, int]:
    """What wait_workflow gave (a status or its error), how long it took and how
    many times it read the workflow; in a thread, so that a wait that never
    ends fails the test instead of hanging it."""
    reads = [0]
    read = app.store.workflow_status

    def counted(workflow_id: int) -> Any:
        reads[0] += 1
        return read(workflow_id)

    app.store.workflow_status = counted  # type: ignore[method-assign]
    outcome: list[Any] = []

    def wait() -> None:
        try:
            outcome.append(app.wait_workflow(workflow, timeout=timeout))
        except TimeoutError as error:
            outcome.append(error)

    began = time.monotonic()
    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    thread.join(timeout=60)
    took = time.monotonic() - began
    assert not thread.is_alive(), f"still waiting after {took:.0f}s, {reads[0]:,} reads"
    return outcome[0], took, reads[0]


def test_a_wait_on_a_workflow_whose_steps_have_all_ended_but_that_runs_ends_at_its_timeout(
    app: due.App, step: due.Task
) -> None:
    """Every step has ended, yet the workflow's row says it runs (its counts
    broken by hand here): the wait gives up at its timeout, having read the
    workflow a few times a second, not in a loop that spins."""
    handle = app.chain(step.request(), step.request())
    drain(app)
    assert app.workflow_status(handle.id).state == "succeeded"
    with plain_transaction(app.url) as conn:
        conn.execute(
            "UPDATE due_workflows SET state = 'running', finished_at = NULL, steps_ended = 1 "
            f"WHERE id = {handle.id}"
        )

    error, took, reads = waited(app, handle.id, f"{TIMEOUT}s")
    assert isinstance(error, TimeoutError)
    assert "every step has ended, yet it still says it runs (1 of 2" in str(error)
    assert took >= TIMEOUT
    assert reads <= TIMEOUT / STATUS_PACE + 3  # paced (before: 100,000s of reads)


def test_a_wait_on_a_step_that_never_runs_ends_at_its_timeout(app: due.App, step: due.Task) -> None:
    handle = app.chain(step.request(), step.request())  # no worker runs them
    error, took, reads = waited(app, handle.id, f"{TIMEOUT}s")
    assert isinstance(error, TimeoutError)
    assert "step 'step-1' is queued" in str(error)
    assert took >= TIMEOUT
    assert reads <= 3


def test_a_wait_returns_the_workflow_once_it_has_ended(app: due.App, step: due.Task) -> None:
    handle = app.chain(step.request(), step.request())
    drain(app)
    status, _, reads = waited(app, handle.id, "10s")
    assert status.state == "succeeded" and reads == 1
