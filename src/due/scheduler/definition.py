"""Schedules: named recurring definitions with explicit misfire and overlap policies."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from due.durations import DurationLike, to_seconds
from due.errors import ConfigurationError
from due.payload import DEFAULT_MAX_PAYLOAD_BYTES, encode_arguments
from due.scheduler.timing import Timing, check_cron, check_interval, zone

DEFAULT_CATCH_UP_LIMIT = 10
DEFAULT_MISFIRE_GRACE_SECONDS = 60.0
MAX_SCHEDULE_NAME = 200


class Misfire(enum.StrEnum):
    """What to do with scheduled times that passed while nothing could fire them."""

    SKIP = "skip"
    """Record them as missed; resume with the next future time."""
    CATCH_UP = "catch_up"
    """One run per missed time, oldest first, at most `catch_up_limit`."""
    LATEST = "latest"
    """One run for the newest missed time; the others recorded as missed."""


class Overlap(enum.StrEnum):
    """What to do when a time comes while the previous run has not ended."""

    ALLOW = "allow"
    """Start it anyway: runs may overlap."""
    FORBID = "forbid"
    """Skip this time (recorded as skipped)."""
    QUEUE = "queue"
    """Start it when the previous run ends (at most one run waits)."""
    REPLACE = "replace"
    """Cancel the previous run, then start this one when it has ended."""


DEFAULT_MISFIRE = Misfire.LATEST
DEFAULT_OVERLAP = Overlap.FORBID


@dataclass(frozen=True)
class Schedule:
    """A validated schedule definition."""

    name: str
    task: str
    timing: Timing
    payload: str
    """The arguments of every run, as JSON (like a job's)."""
    queue: str
    priority: int
    max_attempts: int
    misfire: Misfire = DEFAULT_MISFIRE
    overlap: Overlap = DEFAULT_OVERLAP
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT
    misfire_grace: float = DEFAULT_MISFIRE_GRACE_SECONDS
    enabled: bool = True
    args: tuple[Any, ...] = field(default=(), compare=False)
    kwargs: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def fingerprint(self) -> str:
        """Changes whenever the definition changes (what the sync compares)."""
        parts = [
            self.task,
            self.timing.cron,
            self.timing.every,
            self.timing.tz,
            self.payload,
            self.queue,
            self.priority,
            self.max_attempts,
            self.misfire.value,
            self.overlap.value,
            self.catch_up_limit,
            self.misfire_grace,
        ]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def define_schedule(
    name: str,
    *,
    task: str,
    cron: str | None = None,
    every: DurationLike | None = None,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    tz: str = "UTC",
    misfire: Misfire | str = DEFAULT_MISFIRE,
    overlap: Overlap | str = DEFAULT_OVERLAP,
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
    misfire_grace: DurationLike = DEFAULT_MISFIRE_GRACE_SECONDS,
    queue: str,
    priority: int,
    max_attempts: int,
    enabled: bool = True,
) -> Schedule:
    """Validate a schedule; every problem is a ConfigurationError that says what to fix.

    `queue`, `priority` and `max_attempts` are the task's unless the schedule
    overrides them (the App resolves them), so a scheduler that does not know
    the task still enqueues its runs right.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_SCHEDULE_NAME:
        raise ConfigurationError(
            f"schedule name must be a non-empty string of at most {MAX_SCHEDULE_NAME} "
            f"characters, got {name!r}"
        )
    if (cron is None) == (every is None):
        raise ConfigurationError(
            f"schedule {name!r}: give exactly one of cron=... (e.g. '0 2 * * *') "
            "or every=... (e.g. '90s')"
        )
    zone(tz)
    timing = Timing(
        check_cron(cron) if cron is not None else None,
        check_interval(every) if every is not None else None,
        tz,
    )
    if not isinstance(catch_up_limit, int) or catch_up_limit < 1:
        raise ConfigurationError(f"schedule {name!r}: catch_up_limit must be a whole number >= 1")
    grace = to_seconds(misfire_grace, what=f"schedule {name!r}: misfire_grace")
    arguments = tuple(args)
    keywords = dict(kwargs or {})
    return Schedule(
        name=name,
        task=task,
        timing=timing,
        payload=encode_arguments(task, arguments, keywords, DEFAULT_MAX_PAYLOAD_BYTES),
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        misfire=_policy(Misfire, misfire, name, "misfire"),
        overlap=_policy(Overlap, overlap, name, "overlap"),
        catch_up_limit=catch_up_limit,
        misfire_grace=grace,
        enabled=bool(enabled),
        args=arguments,
        kwargs=keywords,
    )


def _policy(kind: type[Misfire] | type[Overlap], value: object, name: str, what: str) -> Any:
    try:
        return kind(str(value))
    except ValueError:
        choices = ", ".join(repr(member.value) for member in kind)
        raise ConfigurationError(
            f"schedule {name!r}: {what}={value!r} is not a policy; choose one of {choices}"
        ) from None


@dataclass
class StoredSchedule:
    """A schedule as the database holds it: its definition and its state."""

    schedule: Schedule
    source: str
    """'code' (synced from an App when a process starts) or 'runtime'."""
    enabled: bool
    paused: bool
    next_fire_at: datetime
    fingerprint: str

    @property
    def name(self) -> str:
        return self.schedule.name


@dataclass
class ScheduleOverview:
    """What `due schedules` shows for one schedule."""

    stored: StoredSchedule
    last_run_at: datetime | None
    last_run_state: str | None
    last_success_at: datetime | None
    skipped: int
    missed: int


@dataclass
class ScheduleRun:
    """One scheduled time and what became of it."""

    schedule: str
    scheduled_for: datetime
    outcome: str
    reason: str | None
    job_id: int | None
    job_state: str | None
    recorded_at: datetime


def stored_schedule(row: dict[str, Any]) -> StoredSchedule:
    """From a row in Python types (times as datetimes, payload as a dict)."""
    payload = row["payload"]
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    data = json.loads(text)
    schedule = Schedule(
        name=row["name"],
        task=row["task"],
        timing=Timing(row["cron"], row["every"], row["tz"]),
        payload=text,
        queue=row["queue"],
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        misfire=Misfire(row["misfire"]),
        overlap=Overlap(row["overlap"]),
        catch_up_limit=row["catch_up_limit"],
        misfire_grace=row["misfire_grace"],
        enabled=bool(row["enabled"]),
        args=tuple(data.get("args", ())),
        kwargs=dict(data.get("kwargs", {})),
    )
    return StoredSchedule(
        schedule,
        row["source"],
        bool(row["enabled"]),
        bool(row["paused"]),
        row["next_fire_at"],
        row["fingerprint"],
    )
