"""What the scheduler logs for a run it starts: the ids, and no field without a
value (`reason=None` on every run read as if something had gone wrong)."""

from __future__ import annotations

import logging

import pytest

import due
from due.clock import FakeClock
from tests.store.test_bad_schedules import lead, scheduler_of


def test_a_run_started_logs_its_job_and_no_empty_reason(
    app: due.App, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="stamp")
    def stamp() -> None: ...

    app.add_schedule("digest", every="10s", task=stamp)
    clock.advance("10s")
    with caplog.at_level(logging.INFO, logger="due.scheduler"):
        lead(scheduler_of(app, clock))
    (logged,) = [r for r in caplog.records if getattr(r, "event", None) == "schedule.enqueued"]
    (run,) = app.schedule_runs("digest")
    assert logged.getMessage() == (
        f"schedule.enqueued schedule=digest scheduled_for={run.scheduled_for.isoformat()} "
        f"job={run.job_id}"
    )
