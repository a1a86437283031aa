"""The log line of each way an attempt ends: its event, level and fields, and
none built when its level is off (a line per job)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

import due
from due import JobState
from due.core.jobs import AttemptError
from due.core.records import CLAIM_COLUMNS, Completion, read_claimed
from due.worker.completer import _log_end
from due.worker.ledger import RunningJobs
from due.worker.running import RunningJob

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def running_job(app: due.App) -> RunningJob:
    @app.task(name="t", queue="q")
    def t() -> None: ...

    payload = json.dumps({"args": [], "kwargs": {}})
    row = (7, "t", "q", 0, payload, 2, 3, 1, NOW, NOW, NOW, None, None, None, None, 0)
    (claimed,), _ = read_claimed(CLAIM_COLUMNS, [row])
    running = RunningJob(claimed, t, RunningJobs("q", 1), 30.0, 0.0)
    running.seconds = 0.25
    return running


ERROR = AttemptError(2, "boom", None, NOW)
BASE = {"job": 7, "task": "t", "queue": "q", "attempt": 2, "duration_ms": 250.0}
ENDS: list[tuple[Completion, str, int, dict[str, Any]]] = [
    (Completion(7, 1, JobState.SUCCEEDED), "job.succeeded", logging.INFO, {}),
    (
        Completion(7, 1, JobState.SUCCEEDED, warning="too few rows"),
        "job.warned",
        logging.WARNING,
        {"warning": "too few rows"},
    ),
    (
        Completion(7, 1, JobState.QUEUED, error=ERROR, retry_in=1.23456),
        "job.retrying",
        logging.WARNING,
        {"retry_in": 1.235, "error": "boom"},
    ),
    (Completion(7, 1, JobState.WAITING), "job.waiting", logging.INFO, {}),
    (Completion(7, 1, JobState.CANCELLED, error=ERROR), "job.cancelled", logging.INFO, {}),
    (
        Completion(7, 1, JobState.FAILED, error=ERROR),
        "job.failed",
        logging.ERROR,
        {"error": "boom"},
    ),
]


@pytest.mark.parametrize(("completion", "name", "level", "extra"), ENDS)
def test_each_end_is_logged_with_its_fields(
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
    completion: Completion,
    name: str,
    level: int,
    extra: dict[str, Any],
) -> None:
    with due.App(sqlite_url) as app:
        running = running_job(app)
        with caplog.at_level(logging.DEBUG, logger="due.worker"):
            _log_end(running, completion, applied=True)
        (record,) = caplog.records
        assert (record.event, record.levelno, record.fields) == (  # type: ignore[attr-defined]
            name,
            level,
            BASE | extra,
        )
        caplog.clear()
        with caplog.at_level(level + 1, logger="due.worker"):
            _log_end(running, completion, applied=True)
        assert caplog.records == []
