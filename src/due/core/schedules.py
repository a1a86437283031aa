"""Schedules as values: the definition, its state, and what became of each time.

Also the records of a plan and a sync (`scheduler/` decides; the store records).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from due.core.timing import MAX_INTERVAL_SECONDS, Timing, timing_problem
from due.durations import MAX_SECONDS

DEFAULT_CATCH_UP_LIMIT = 10
DEFAULT_MISFIRE_GRACE_SECONDS = 60.0
DEFAULT_ALERT_AFTER_SECONDS = 300.0
"""A schedule alerts when a run has not started this long after its time, or
no run succeeded within its period plus this."""
MAX_SCHEDULE_NAME = 200
MAX_CATCH_UP_LIMIT = 1000
"""A plan examines at most this many scheduled times (the planner's
MAX_RECORDED_TIMES): a larger limit would change nothing."""
MAX_SCHEDULE_SECONDS = MAX_INTERVAL_SECONDS
"""The longest misfire grace or alert delay: the horizon a schedule must fire in."""


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
    """Start it anyway (runs may overlap)."""
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
    """A validated schedule definition, as `app.schedule` and `app.add_schedule` return it.

    Times and durations are in seconds; the options mean what they mean
    for `app.schedule`.
    """

    name: str
    """Its unique name."""
    task: str
    """The name of the task each run enqueues."""
    timing: Timing
    """When it fires, a cron expression in a time zone or an interval."""
    payload: str
    """The arguments of every run, as JSON (like a job's)."""
    queue: str
    """The queue of its runs."""
    priority: int
    """The priority of its runs."""
    max_attempts: int
    """The attempts each run may have (its task's `Retry`)."""
    misfire: Misfire = DEFAULT_MISFIRE
    """What to do with times missed while nothing could fire them."""
    overlap: Overlap = DEFAULT_OVERLAP
    """What to do when a time comes while the previous run has not ended."""
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT
    """With `Misfire.CATCH_UP`, the most missed times run."""
    misfire_grace: float = DEFAULT_MISFIRE_GRACE_SECONDS
    """A time this late (seconds) still runs as on time."""
    enabled: bool = True
    """False for a schedule defined disabled, or pruned; it does not fire."""
    alert_after: float = DEFAULT_ALERT_AFTER_SECONDS
    """Seconds after which a late or silent schedule alerts."""
    limits: str | None = None
    """The limits its runs count against, as a job stores them (its task's)."""
    args: tuple[Any, ...] = field(default=(), compare=False)
    """The positional arguments of every run."""
    kwargs: dict[str, Any] = field(default_factory=dict, compare=False)
    """The keyword arguments of every run."""

    @property
    def fingerprint(self) -> str:
        """Changes whenever the definition changes (what the sync compares)."""
        parts: list[Any] = [
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
        if self.alert_after != DEFAULT_ALERT_AFTER_SECONDS:
            parts.append(self.alert_after)  # (so fingerprints of older versions stand)
        if self.limits is not None:
            parts.append(["limits", self.limits])
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


@dataclass
class StoredSchedule:
    """A schedule as the database holds it: its definition and its state."""

    schedule: Schedule
    """Its definition."""
    source: str
    """`code` (synced from an App when a process starts) or `runtime` (added)."""
    enabled: bool
    """False once disabled (pruned from the code); it does not fire."""
    paused: bool
    """Paused by hand (`app.pause_schedule`); its times are recorded as skipped."""
    next_fire_at: datetime
    """Its next scheduled time."""
    fingerprint: str
    """The fingerprint of the definition stored."""
    problem: str | None = None
    """Why it cannot fire (found by a scheduler, or on reading its row), or None.

    A schedule with a problem is not fired until its definition is written again.
    """

    @property
    def name(self) -> str:
        """The schedule's name."""
        return self.schedule.name


@dataclass
class ScheduleOverview:
    """What `due schedules` shows for one schedule."""

    stored: StoredSchedule
    """The schedule as stored, with its state."""
    last_run_at: datetime | None
    """The scheduled time of its latest run."""
    last_run_state: str | None
    """The state of its latest run's job (None once that job is pruned)."""
    last_success_at: datetime | None
    """When a run of it last succeeded."""
    skipped: int
    """Skipped times in the kept history (paused, or by its overlap policy)."""
    missed: int
    """Missed times in the kept history (pruned with it)."""
    missed_total: int = 0
    """Missed times since the schedule was made (never pruned)."""
    created_at: datetime | None = None
    """When the schedule was first stored."""


@dataclass
class ScheduleRun:
    """One scheduled time and what became of it."""

    schedule: str
    """The schedule's name."""
    scheduled_for: datetime
    """The scheduled time."""
    outcome: str
    """`enqueued` (a run started), `pending` (waiting for the previous run), `skipped`
    or `missed`."""
    reason: str | None
    """Why it was skipped or missed."""
    job_id: int | None
    """The job of its run, if one started."""
    job_state: str | None
    """That job's state, while the job is kept."""
    recorded_at: datetime
    """When a scheduler recorded the time."""
    started_at: datetime | None = None
    """When its job's latest attempt started, while the job is kept."""
    finished_at: datetime | None = None
    """When its job ended, while the job is kept."""


def stored_schedule(row: dict[str, Any]) -> StoredSchedule:
    """From a row in Python types (times as datetimes, payload as a dict).

    Never raises for a value it cannot read (a row written by hand, or by
    another version): the schedule is returned with a `problem` that says why,
    and is not fired.
    """
    try:
        schedule, problem = _schedule_of(row), row.get("problem")
    except (ValueError, TypeError, AttributeError, KeyError) as error:
        schedule = _unreadable(row)
        problem = f"its row cannot be read ({type(error).__name__}: {error})"
    return StoredSchedule(
        schedule,
        row["source"],
        bool(row["enabled"]),
        bool(row["paused"]),
        row["next_fire_at"],
        row["fingerprint"],
        problem,
    )


def _schedule_of(row: dict[str, Any]) -> Schedule:
    payload = row["payload"]
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    data = json.loads(text)
    return Schedule(
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
        alert_after=float(row.get("alert_after", DEFAULT_ALERT_AFTER_SECONDS)),
        limits=row.get("limits"),
        args=tuple(data.get("args", ())),
        kwargs=dict(data.get("kwargs", {})),
    )


def _unreadable(row: dict[str, Any]) -> Schedule:
    """What can be shown of a row that cannot be read whole.

    The policies are left at their defaults: such a schedule is not planned.
    """
    payload = row["payload"]
    return Schedule(
        name=row["name"],
        task=row["task"],
        timing=Timing(row["cron"], row["every"], row["tz"]),
        payload=payload if isinstance(payload, str) else json.dumps(payload),
        queue=row["queue"],
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        enabled=bool(row["enabled"]),
    )


def schedule_problem(schedule: Schedule, now: datetime) -> str | None:
    """Why a stored definition cannot fire within the horizon after `now`, or None.

    Never raises (see core/timing.py): the scheduler asks before planning each
    schedule, and the alerts before reading its times, so a definition written
    by hand, or by a version of `due` that did not check, is reported instead
    of stopping them. (Looser than a new definition's checks where an older one
    did no harm: a large catch_up_limit, a long grace.)
    """
    problem = timing_problem(schedule.timing, now)
    if problem:
        return problem
    limit = schedule.catch_up_limit
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return f"its catch_up_limit {limit!r} is not a whole number of at least 1"
    for what, value in (
        ("misfire_grace", schedule.misfire_grace),
        ("alert_after", schedule.alert_after),
    ):
        if not _computable(value):
            return f"its {what} of {value!r} seconds is not a duration its times can be read with"
    return None


_COMPUTABLE_SECONDS = float(MAX_SECONDS)
"""The longest duration due takes: far from where dates overflow (year 9999)."""


def _computable(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 <= value <= _COMPUTABLE_SECONDS
    )


class Outcome(enum.StrEnum):
    """What became of one scheduled time."""

    ENQUEUED = "enqueued"
    PENDING = "pending"
    SKIPPED = "skipped"
    MISSED = "missed"


@dataclass(frozen=True, slots=True)
class Firing:
    """One scheduled time a plan decided about, and what it decided."""

    scheduled_for: datetime
    outcome: Outcome
    reason: str | None = None
    times: int = 1
    """The scheduled times it stands for: 1, or for the row that sums up the
    times past the plan's bound (planner.MAX_RECORDED_TIMES) their count, a
    lower bound when its reason says "at least"."""


@dataclass
class Plan:
    """What a scheduler decided for one schedule at one instant."""

    firings: list[Firing] = field(default_factory=list)
    next_fire_at: datetime | None = None
    cancel_active: bool = False
    """`replace`: the active run must be cancelled before the pending one starts."""
    problem: str | None = None
    """Why the schedule cannot fire: nothing is recorded, the schedule is marked."""

    def of(self, outcome: Outcome) -> list[Firing]:
        """The firings of one outcome."""
        return [firing for firing in self.firings if firing.outcome == outcome]


Decide = Callable[[StoredSchedule, datetime, bool, bool], Plan]
"""(schedule, the database's now, a run is active, a run waits) -> the plan."""


@dataclass(frozen=True, slots=True)
class LeaseFence:
    """The leader lease a write depends on: the write happens only while it holds."""

    name: str
    holder: str
    token: int


@dataclass
class Materialised:
    """What one materialisation recorded: each new firing, with its job if it started."""

    schedule: str
    recorded: list[tuple[Firing, int | None]]
    next_fire_at: datetime | None
    problem: str | None = None
    """Newly found: why the schedule cannot fire (it was marked, and is not fired)."""
    misfire: Misfire | None = None
    """The misfire policy the times were planned by (None: nothing was planned)."""


@dataclass
class SyncReport:
    """Code-defined schedules compared with the database.

    A sync adds and changes; it never disables. A schedule gone from this
    code may be one that newer code, started elsewhere during a rolling
    deploy, defines: `not_in_code` names them, and `prune` disables them when
    asked (scheduler/catalog.py says why).
    """

    to_add: list[Schedule] = field(default_factory=list)
    to_change: list[Schedule] = field(default_factory=list)
    not_in_code: list[str] = field(default_factory=list)
    """Enabled schedules stored as defined in code that this code does not define."""
    settled: list[Materialised] = field(default_factory=list)
    """Times already due under a definition this sync replaced, settled under it."""

    @property
    def added(self) -> list[str]:
        """The names of the schedules added."""
        return [schedule.name for schedule in self.to_add]

    @property
    def changed(self) -> list[str]:
        """The names of the schedules whose definition was written again."""
        return [schedule.name for schedule in self.to_change]
