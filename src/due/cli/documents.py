"""The JSON documents of `--json`: one per command, with stable keys.

docs/reference/json.md shows each, and a test holds it to these. Keys are only
ever added, never renamed or removed; times are ISO 8601 in UTC, durations are
seconds, absent values are null.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

from due.cli.output import iso
from due.core.jobs import AttemptError, Job
from due.core.limits import Limit, LimitOverview, shown_key
from due.core.records import QueueOverview, WorkerInfo
from due.core.schedules import ScheduleOverview, ScheduleRun
from due.core.stats import TaskFigures
from due.shown_arguments import shown_arguments
from due.visibility.schedule_health import ExpectedRun
from due.workflows import WorkflowStatus, WorkflowSummary

if TYPE_CHECKING:
    from due.app import App


def job_document(job: Job, app: App | None) -> dict[str, Any]:
    """`job` as JSON, its arguments as shown (`app`'s redaction: due.shown_arguments)."""
    args, kwargs = shown_arguments(job, app)
    return {
        "id": job.id,
        "task": job.task,
        "queue": job.queue,
        "state": job.state.value,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "args": args,
        "kwargs": kwargs,
        "key": job.key,
        "run_at": iso(job.run_at),
        "created_at": iso(job.created_at),
        "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at),
        "lease_expires_at": iso(job.lease_expires_at),
        "worker": job.worker,
        "result": job.result,
        "warning": job.warning,
        "last_error": job.last_error,
        "errors": [_attempt_document(error) for error in job.errors],
        "schedule": job.schedule,
        "scheduled_for": iso(job.scheduled_for),
        "cancel_requested": job.cancel_requested,
        "checkpoint": job.checkpoint,
        "progress": job.progress,
        "stuck": job.stuck,
        "held": job.held,
        "parent_id": job.parent_id,
        "pieces": None
        if job.pieces is None
        else {
            "total": job.pieces.total,
            "succeeded": job.pieces.succeeded,
            "failed": job.pieces.failed,
        },
        "limits": [{"limit": name, "key": shown_key(key)} for name, key in job.limits],
        "limit_wait": None
        if job.limit_wait is None
        else {"limit": job.limit_wait, "key": shown_key(job.limit_wait_key)},
    }


def _attempt_document(error: AttemptError) -> dict[str, Any]:
    return {
        "attempt": error.attempt,
        "kind": error.kind,
        "error": error.error,
        "traceback": error.traceback,
        "at": iso(error.at),
        "exception": error.exception,
        "worker": error.worker,
    }


def queue_document(
    queue: QueueOverview, now: datetime, workers: int | None = None
) -> dict[str, Any]:
    age = None
    if queue.oldest_due_at is not None:
        age = max(0.0, (now - queue.oldest_due_at).total_seconds())
    return {
        "name": queue.name,
        "queued": queue.queued,
        "due": queue.due,
        "scheduled": queue.scheduled,
        "running": queue.running,
        "waiting": queue.waiting,
        "retrying": queue.retrying,
        "failed": queue.failed,
        "stuck": queue.stuck,
        "oldest_due_at": iso(queue.oldest_due_at),
        "oldest_due_age_seconds": age,
        "paused": queue.paused,
        "at_least": sorted(queue.at_least),
        **({} if workers is None else {"live_workers": workers}),
    }


def task_document(figures: TaskFigures) -> dict[str, Any]:
    """A task's counts and durations per window ("5m", "1h", "24h", "total")."""
    return {
        "task": figures.task,
        "queue": figures.queue,
        "windows": {
            name: {
                "counts": window.counts,
                "duration_seconds": {
                    **{k: _bound(v) for k, v in window.percentiles().items()},
                    "count": window.durations.count,
                    "sum": window.durations.total_seconds,
                },
            }
            for name, window in figures.windows.items()
        },
    }


def schedule_document(overview: ScheduleOverview) -> dict[str, Any]:
    stored = overview.stored
    definition = stored.schedule
    timing = definition.timing
    return {
        "name": stored.name,
        "task": definition.task,
        "cron": timing.cron,
        "every_seconds": timing.every,
        "tz": timing.tz,
        "description": timing.describe(),
        "queue": definition.queue,
        "misfire": definition.misfire.value,
        "overlap": definition.overlap.value,
        "source": stored.source,
        "enabled": stored.enabled,
        "paused": stored.paused,
        "next_run_at": iso(stored.next_fire_at) if stored.enabled else None,
        "last_run_at": iso(overview.last_run_at),
        "last_run_state": overview.last_run_state,
        "last_success_at": iso(overview.last_success_at),
        "skipped": overview.skipped,
        "missed": overview.missed,
        "missed_total": overview.missed_total,
        "alert_after_seconds": definition.alert_after,
        "problem": stored.problem,
    }


def schedule_run_document(run: ScheduleRun) -> dict[str, Any]:
    return {
        "schedule": run.schedule,
        "scheduled_for": iso(run.scheduled_for),
        "outcome": run.outcome,
        "reason": run.reason,
        "job_id": run.job_id,
        "job_state": run.job_state,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
    }


def worker_document(info: WorkerInfo, running: int = 0) -> dict[str, Any]:
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "state": info.state,
        "queues": info.queues,
        "running": running,
        "tasks": list(info.tasks),
        "started_at": iso(info.started_at),
        "last_seen_at": iso(info.last_seen_at),
        "stopped_at": iso(info.stopped_at),
    }


def _bound(seconds: float | None) -> float | str | None:
    """A percentile's bucket bound; "+Inf" past the last one (JSON has no infinity)."""
    return "+Inf" if seconds == math.inf else seconds


def expected_run_document(run: ExpectedRun) -> dict[str, Any]:
    return {
        "scheduled_for": iso(run.scheduled_for),
        "outcome": run.outcome,
        "reason": run.reason,
        "job_id": run.job_id,
        "job_state": run.job_state,
        "seconds": run.seconds,
        "expected": run.expected,
    }


def limit_document(overview: LimitOverview) -> dict[str, Any]:
    """A limit: its numbers in force (and the code's), its figures, its busiest keys."""
    return {
        "name": overview.name,
        **_numbers(overview.limit),
        "overridden": overview.overridden,
        "code": _numbers(overview.code),
        "running": overview.running,
        "waiting": overview.waiting,
        "started_in_window": overview.started_in_window,
        "started_total": overview.started_total,
        "keys": overview.keys,
        "busiest_keys": [
            {
                "key": shown_key(key.key) or None,
                "running": key.running,
                "waiting": key.waiting,
                "started_in_window": key.started_in_window,
                "started_total": key.started_total,
            }
            for key in overview.busiest
        ],
    }


def _numbers(limit: Limit) -> dict[str, Any]:
    return {
        "concurrency": limit.concurrency,
        "rate": limit.rate_text,
        "rate_starts": limit.rate,
        "rate_period_seconds": limit.period,
    }


def workflow_summary_document(flow: WorkflowSummary) -> dict[str, Any]:
    """A workflow without its steps (`due workflows`)."""
    return {
        "id": flow.id,
        "name": flow.name,
        "state": flow.state,
        "steps_total": flow.steps_total,
        "steps_ended": flow.steps_ended,
        "steps_failed": flow.steps_failed,
        "steps_cancelled": flow.steps_cancelled,
        "created_at": iso(flow.created_at),
        "finished_at": iso(flow.finished_at),
    }


def workflow_document(status: WorkflowStatus) -> dict[str, Any]:
    """A workflow and its steps (`due workflow show`)."""
    return {
        "id": status.id,
        "name": status.name,
        "state": status.state,
        "steps_total": status.steps_total,
        "steps_ended": status.steps_ended,
        "created_at": iso(status.created_at),
        "finished_at": iso(status.finished_at),
        "steps": [
            {
                "name": step.name,
                "job_id": step.job_id,
                "state": step.state.value,
                "task": step.task,
                "after": list(step.after),
                "started_at": iso(step.started_at),
                "finished_at": iso(step.finished_at),
                "duration_seconds": step.duration,
            }
            for step in status.steps.values()
        ],
    }
