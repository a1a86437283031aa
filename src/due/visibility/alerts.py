"""The alerts a snapshot raises, and the thresholds that decide them.

What alerts (each in the reference's metrics and alerts page, with its default):

- a queue whose oldest due job has waited longer than its threshold
  (`app.queue("emails", oldest_due_warning="30s", oldest_due_critical="2m")`;
  default: warning over 1 minute, critical over 5); a job that waits for a
  limit is still due, and when the oldest does, the alert names the limit; when
  no live worker of the queue knows the oldest's task, the alert names it;
- a queue with due jobs that no live worker serves (critical);
- stuck jobs: running, their progress still for their task's `stuck_after`;
- jobs that failed for good within the failures window (default: the last hour);
- jobs whose result failed their task's `check=` within that window;
- a schedule that cannot fire (critical: its definition has no time within the
  horizon, or its row cannot be read; the scheduler skips it and runs the rest),
- a schedule whose time passed `alert_after` ago without a run (critical: is a
  scheduler running?), whose run has not started `alert_after` after its time,
  or with no success within its period plus `alert_after` (a dead-man's switch:
  "the nightly job that stopped running weeks ago");
- a schedule stored as defined in code that the app's code does not define
  (only when the rules know that code: `AlertRules.code_schedules`): the module
  that declares it is not imported by the app module, or the code dropped it
  and nobody ran `due schedule prune`. It keeps firing either way;
- a running workflow that cannot advance (critical: no step queued or running,
  and a step waits though its upstream steps have all ended; never, unless a
  graph is broken).

Severity follows the monitoring-plugin convention: 0 ok, 1 warning, 2 critical.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from due.core.limits import shown_key
from due.core.records import QueueOverview
from due.core.schedules import ScheduleOverview, schedule_problem
from due.core.stats import Outcome
from due.core.timing import Timing
from due.durations import DurationLike, describe, to_seconds
from due.errors import ConfigurationError
from due.visibility.snapshot import Snapshot

DEFAULT_OLDEST_DUE_WARNING = 60.0
DEFAULT_OLDEST_DUE_CRITICAL = 300.0


class Severity(enum.IntEnum):
    """How bad an alert is; the numbers are `due check`'s exit codes."""

    OK = 0
    """Nothing to report."""
    WARNING = 1
    """Look at it soon."""
    CRITICAL = 2
    """Look at it now (jobs are not running, or a schedule is not firing)."""


@dataclass(frozen=True, slots=True)
class QueueThresholds:
    """How long a queue's oldest due job may wait (seconds)."""

    oldest_due_warning: float = DEFAULT_OLDEST_DUE_WARNING
    oldest_due_critical: float = DEFAULT_OLDEST_DUE_CRITICAL

    @classmethod
    def build(
        cls,
        what: str,
        warning: DurationLike | None = None,
        critical: DurationLike | None = None,
        base: QueueThresholds | None = None,
    ) -> QueueThresholds:
        """Thresholds from durations, each defaulting to `base`'s (or the defaults).

        Raises:
            ConfigurationError: A duration that cannot be read, is not positive,
                or a warning over the critical threshold.
        """
        base = base or cls()
        warn = base.oldest_due_warning if warning is None else _positive(warning, what, "warning")
        crit = (
            base.oldest_due_critical if critical is None else _positive(critical, what, "critical")
        )
        if warn > crit:
            raise ConfigurationError(
                f"{what}: oldest_due_warning ({describe(warn)}) must not exceed "
                f"oldest_due_critical ({describe(crit)})"
            )
        return cls(warn, crit)


def _positive(value: DurationLike, what: str, level: str) -> float:
    seconds = to_seconds(value, what=f"{what}: oldest_due_{level}")
    if seconds <= 0:
        raise ConfigurationError(f"{what}: oldest_due_{level} must be positive, got {value!r}")
    return seconds


@dataclass(frozen=True)
class AlertRules:
    """The thresholds `due check` applies: per queue, and for every other queue."""

    queues: Mapping[str, QueueThresholds] = field(default_factory=dict)
    """Thresholds declared per queue (`app.queue(...)`)."""
    default: QueueThresholds = QueueThresholds()
    """For every other queue."""
    code_schedules: frozenset[str] | None = None
    """The schedules the app's code defines, when the reader loaded that code
    (`due check --app`); None when it did not (a bare URL), and then no
    schedule is judged by it."""

    def for_queue(self, name: str) -> QueueThresholds:
        """The thresholds of one queue."""
        return self.queues.get(name, self.default)


@dataclass(frozen=True, slots=True)
class Alert:
    """One active alert, as `app.check()` returns it and `due check` prints it."""

    severity: Severity
    """How bad it is."""
    kind: str
    """What alerts.

    One of `oldest_due`, `no_worker`, `stuck`, `failed`, `warned`,
    `schedule_invalid`, `schedule_late`, `run_not_started`, `schedule_silent`,
    `schedule_not_in_code`.
    """
    subject: str
    """What it is about, as `queue emails`, `task send_report` or `schedule nightly`."""
    message: str
    """What is wrong, in words."""

    def line(self) -> str:
        """The alert as `due check` prints it.

        Returns:
            One line, as `CRITICAL queue emails: oldest due job waited 6m12s
            (critical over 5m)`.
        """
        return f"{self.severity.name} {self.subject}: {self.message}"


def evaluate(snapshot: Snapshot, rules: AlertRules) -> list[Alert]:
    """Every alert the snapshot raises, the most severe first."""
    alerts = [
        *_queue_alerts(snapshot, rules),
        *_task_alerts(snapshot),
        *(
            alert
            for overview in snapshot.schedules
            for alert in schedule_alerts(overview, snapshot.at)
        ),
        *_not_in_code_alerts(snapshot, rules.code_schedules),
        *_workflow_alerts(snapshot),
    ]
    return sorted(alerts, key=lambda a: (-a.severity, a.subject, a.kind))


def worst(alerts: list[Alert]) -> Severity:
    """The most severe of the alerts (OK for none)."""
    return max((alert.severity for alert in alerts), default=Severity.OK)


def _queue_alerts(snapshot: Snapshot, rules: AlertRules) -> list[Alert]:
    alerts = []
    for queue in snapshot.queues:
        subject = f"queue {queue.name}"
        if queue.paused:
            continue  # waiting on purpose
        age = snapshot.oldest_due_age(queue)
        limits = rules.for_queue(queue.name)
        if age is not None and age > limits.oldest_due_warning:
            critical = age > limits.oldest_due_critical
            over = limits.oldest_due_critical if critical else limits.oldest_due_warning
            level = "critical" if critical else "warning"
            alerts.append(
                Alert(
                    Severity.CRITICAL if critical else Severity.WARNING,
                    "oldest_due",
                    subject,
                    f"oldest due job waited {describe(round(age))} ({level} over {describe(over)})"
                    + _waits_for(queue, snapshot.unknown_oldest.get(queue.name)),
                )
            )
        if queue.due and not snapshot.live_workers.get(queue.name):
            alerts.append(
                Alert(
                    Severity.CRITICAL,
                    "no_worker",
                    subject,
                    f"{queue.shown('due')} due job{'s' if queue.due != 1 else ''} and no live "
                    "worker serves it",
                )
            )
        if queue.stuck:
            alerts.append(
                Alert(
                    Severity.WARNING,
                    "stuck",
                    subject,
                    f"{queue.stuck} running job{'s' if queue.stuck != 1 else ''} stuck (progress "
                    "still for longer than their task's stuck_after)",
                )
            )
    return alerts


def _waits_for(queue: QueueOverview, unknown_task: str | None = None) -> str:
    """What the oldest due job waits for, when it is known.

    A limit (its queue is served), or else a worker that knows its task (when
    no live worker of the queue does).
    """
    if queue.oldest_due_limit is not None:
        key = queue.oldest_due_limit_key
        key = f" (key {shown_key(key)})" if key else ""
        return f", waiting for limit {queue.oldest_due_limit}{key}"
    if unknown_task is not None:
        return (
            f", of task {unknown_task}, which no live worker of the queue knows (failed "
            "once the unknown-task grace has passed)"
        )
    return ""


def _task_alerts(snapshot: Snapshot) -> list[Alert]:
    window = describe(round(snapshot.failures_window))
    alerts = [
        Alert(
            Severity.WARNING,
            "failed",
            f"task {row['task']}",
            f"{row['failed']} job{'s' if row['failed'] != 1 else ''} of queue {row['queue']} "
            f"failed for good in the last {window}",
        )
        for row in snapshot.failures
    ]
    # Results that failed their check=, from the rollups' last-hour window.
    for figures in snapshot.tasks:
        warned = figures.window("1h").counts.get(Outcome.WARNED.value, 0)
        if warned:
            alerts.append(
                Alert(
                    Severity.WARNING,
                    "warned",
                    f"task {figures.task}",
                    f"{warned} result{'s' if warned != 1 else ''} of queue {figures.queue} "
                    "failed the task's check in the last 1h",
                )
            )
    return alerts


def schedule_alerts(overview: ScheduleOverview, now: datetime) -> list[Alert]:
    """A schedule that cannot fire, or its dead-man's switch.

    Nothing for a disabled one; for a paused one, only a definition that cannot
    fire.
    """
    stored = overview.stored
    if not stored.enabled:
        return []
    schedule = stored.schedule
    subject = f"schedule {schedule.name}"
    problem = stored.problem or schedule_problem(schedule, now)
    if problem:  # its times cannot be computed: the switch below cannot be read either
        fix = "fix its definition (in the code, or remove and add it again)"
        return [
            Alert(Severity.CRITICAL, "schedule_invalid", subject, f"cannot fire: {problem}; {fix}")
        ]
    if stored.paused:
        return []
    tolerance = timedelta(seconds=schedule.alert_after)
    alerts = []
    late = now - stored.next_fire_at
    if late > tolerance:
        alerts.append(
            Alert(
                Severity.CRITICAL,
                "schedule_late",
                subject,
                f"its time {_moment(stored.next_fire_at)} passed "
                f"{describe(round(late.total_seconds()))} ago without a run: is a scheduler "
                "running?",
            )
        )
    if (
        overview.last_run_state == "queued"
        and overview.last_run_at is not None
        and now - overview.last_run_at > tolerance
    ):
        waited = describe(round((now - overview.last_run_at).total_seconds()))
        alerts.append(
            Alert(
                Severity.WARNING,
                "run_not_started",
                subject,
                f"its run of {_moment(overview.last_run_at)} has waited {waited} to start",
            )
        )
    silent = _silent_since(overview, schedule.timing, tolerance, now)
    if silent is not None:
        alerts.append(Alert(Severity.WARNING, "schedule_silent", subject, silent))
    return alerts


def _not_in_code_alerts(snapshot: Snapshot, defined: frozenset[str] | None) -> list[Alert]:
    """Schedules this code does not define, though stored as defined in code.

    Enabled and unpaused ones only; a worker logs `schedule.not_in_code` for
    the same at start.
    """
    if defined is None:
        return []
    return [
        Alert(
            Severity.WARNING,
            "schedule_not_in_code",
            f"schedule {stored.name}",
            "stored as defined in code, but this app does not define it: is the module "
            "that declares it imported by your app module? It keeps firing until "
            "`due schedule prune` disables it",
        )
        for stored in (overview.stored for overview in snapshot.schedules)
        if stored.source == "code"
        and stored.enabled
        and not stored.paused
        and stored.name not in defined
    ]


def _workflow_alerts(snapshot: Snapshot) -> list[Alert]:
    """Running workflows that cannot advance: a critical alert each.

    No step is queued or running, and a step waits though its upstream steps
    have all ended, or every step has ended though the workflow says it runs.
    A step is released, and a workflow ends, in the transaction that records
    the end of its last upstream step, so this never happens; if it does, the
    workflow waits for ever.
    """
    return [
        Alert(
            Severity.CRITICAL,
            "workflow_stuck",
            f"workflow {flow.id} {flow.name}",
            f"cannot advance: step {flow.step!r} waits though its upstream steps have all "
            "ended, and no step is queued or running"
            if flow.step is not None
            else "cannot end: every step has ended, yet it still says it runs (its counts "
            "disagree with its steps)",
        )
        for flow in snapshot.stuck_workflows
    ]


def _silent_since(
    overview: ScheduleOverview, timing: Timing, tolerance: timedelta, now: datetime
) -> str | None:
    """Why the schedule counts as silent, or None.

    Silent: no success within its period (the gap between its two next times
    after the last success) plus the tolerance.
    """
    anchor = overview.last_success_at or overview.created_at
    if anchor is None:
        return None
    first = timing.after(anchor)
    period = timing.after(first) - first
    if now - anchor <= period + tolerance:
        return None
    if overview.last_success_at is None:
        return (
            f"no run has succeeded since it was made {_moment(anchor)} (its period is "
            f"{describe(round(period.total_seconds()))})"
        )
    tolerated = describe(round(tolerance.total_seconds()))
    return (
        f"no success since {_moment(anchor)} (its period is "
        f"{describe(round(period.total_seconds()))}, plus {tolerated})"
    )


def _moment(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")
