"""A schedule's expected times against what became of each.

For every time the schedule should have fired within a window (from its
timing, since it was made), the record the scheduler kept: a run (and its
job's state and duration), skipped or missed (and why), waiting for its
previous run; or no record at all, which means no scheduler acted on that
time (none was running, or none led). Runs triggered by hand are listed too.
A schedule that cannot fire expects no time: only its records are listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from due.core.schedules import ScheduleRun, StoredSchedule, schedule_problem

NOT_RECORDED = "not recorded"
MAX_TIMES = 1000


@dataclass(frozen=True, slots=True)
class ExpectedRun:
    """One time a schedule expected, and what became of it (`app.schedule_health`)."""

    scheduled_for: datetime
    """The expected time."""
    outcome: str
    """`enqueued`, `pending`, `skipped`, `missed` (the scheduler's record), or `not recorded`."""
    reason: str | None = None
    """Why it was skipped or missed."""
    job_id: int | None = None
    """The job of its run, if one started."""
    job_state: str | None = None
    """That job's state, while the job is kept."""
    seconds: float | None = None
    """How long its job ran (its latest attempt), while the job is kept."""
    expected: bool = True
    """False for a run the timing did not call for (triggered by hand)."""


def expected_runs(
    stored: StoredSchedule,
    recorded: list[ScheduleRun],
    since: datetime,
    now: datetime,
    created_at: datetime | None = None,
) -> list[ExpectedRun]:
    """Every expected time in [since, now] (from the schedule's creation on), each
    with its record, plus the recorded runs no expected time accounts for;
    oldest first."""
    start = max(since, created_at) if created_at is not None else since
    times: list[datetime] = []
    if stored.problem is None and schedule_problem(stored.schedule, now) is None:
        moment = stored.schedule.timing.after(start - timedelta(microseconds=1))
        while moment <= now and len(times) < MAX_TIMES:
            times.append(moment)
            moment = stored.schedule.timing.after(moment)
    by_time = {run.scheduled_for: run for run in recorded}
    rows = [_row(at, by_time.get(at), expected=True) for at in times]
    expected = set(times)
    rows += [
        _row(run.scheduled_for, run, expected=False)
        for run in recorded
        if run.scheduled_for not in expected
    ]
    return sorted(rows, key=lambda row: row.scheduled_for)


def _row(at: datetime, run: ScheduleRun | None, *, expected: bool) -> ExpectedRun:
    if run is None:
        return ExpectedRun(at, NOT_RECORDED, "no scheduler acted on this time", expected=True)
    seconds = None
    if run.started_at is not None and run.finished_at is not None:
        seconds = (run.finished_at - run.started_at).total_seconds()
    return ExpectedRun(
        at, run.outcome, run.reason, run.job_id, run.job_state, seconds, expected=expected
    )
