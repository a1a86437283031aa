"""What both backends share about schedules: the sync decision and the records."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from due.core.schedules import Schedule, StoredSchedule, SyncReport


def not_running_reason(row: Mapping[str, Any] | None) -> str | None:
    """Why a schedule's waiting runs must not start (its row, locked), or None."""
    if row is None:
        return "the schedule was removed"
    if not row["enabled"]:
        return "the schedule is disabled"
    if row["paused"]:
        return "the schedule is paused"
    return None


def plan_sync(schedules: Sequence[Schedule], stored: Sequence[StoredSchedule]) -> SyncReport:
    """Add new schedules, update changed ones, disable code schedules gone from the code."""
    known = {row.name: row for row in stored}
    report = SyncReport()
    for schedule in schedules:
        row = known.get(schedule.name)
        if row is None:
            report.to_add.append(schedule)
        elif row.fingerprint != schedule.fingerprint or row.enabled != schedule.enabled:
            report.to_change.append(schedule)
    defined = {schedule.name for schedule in schedules}
    report.disabled = [
        row.name
        for row in stored
        if row.source == "code" and row.enabled and row.name not in defined
    ]
    return report


def definition_params(
    schedule: Schedule,
    source: str,
    now: datetime,
    time_param: Callable[[datetime], Any] = lambda t: t,
) -> dict[str, Any]:
    """The columns of a schedule's row; it next fires at its first time after `now`."""
    return {
        "name": schedule.name,
        "task": schedule.task,
        "cron": schedule.timing.cron,
        "every": schedule.timing.every,
        "tz": schedule.timing.tz,
        "payload": schedule.payload,
        "queue": schedule.queue,
        "priority": schedule.priority,
        "max_attempts": schedule.max_attempts,
        "misfire": schedule.misfire.value,
        "overlap": schedule.overlap.value,
        "catch_up_limit": schedule.catch_up_limit,
        "misfire_grace": schedule.misfire_grace,
        "source": source,
        "enabled": schedule.enabled,
        "fingerprint": schedule.fingerprint,
        "next_fire_at": time_param(schedule.timing.after(now)),
        "now": time_param(now),
    }
