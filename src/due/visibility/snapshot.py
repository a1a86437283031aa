"""One read of everything visibility shows: queues, tasks, schedules, workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from due.core.limits import LimitOverview
from due.core.records import DEFAULT_ALIVE_SECONDS, QueueOverview, WorkerInfo
from due.core.schedules import ScheduleOverview
from due.core.stats import TaskFigures
from due.workflows import StuckWorkflow

if TYPE_CHECKING:
    from due.app import App

DEFAULT_FAILURES_WINDOW = 3600.0
"""How far back "recent failures" look (seconds)."""
ASK_WHY_AFTER = 30.0
"""A queue's oldest due job is asked why it waits once it has waited this long
(seconds): the alerts name a task that no live worker knows."""
WORKERS_SHOWN = 100


@dataclass
class Snapshot:
    at: datetime
    """The database's now when the snapshot was read."""
    queues: list[QueueOverview]
    live_workers: dict[str, int]
    """Per queue: the live workers serving it."""
    tasks: list[TaskFigures]
    schedules: list[ScheduleOverview]
    workers: list[WorkerInfo]
    running: dict[str, int]
    """Per worker id: the jobs it runs now."""
    failures: list[dict[str, Any]]
    """Per queue and task: jobs failed for good within the failures window."""
    failures_window: float
    limits: list[LimitOverview] = field(default_factory=list)
    """Every stored limit with its figures."""
    stuck_workflows: list[StuckWorkflow] = field(default_factory=list)
    """Running workflows that cannot advance (never, unless a graph is broken)."""
    recycled_workers: dict[str, int] = field(default_factory=dict)
    """Worker processes that ever recycled themselves, by reason (jobs, memory)."""
    unknown_oldest: dict[str, str] = field(default_factory=dict)
    """Per queue whose oldest due job waited over ASK_WHY_AFTER: its task, when
    no live worker of the queue knows it."""

    def oldest_due_age(self, queue: QueueOverview) -> float | None:
        """Seconds the queue's oldest due job has waited (None: nothing due)."""
        if queue.oldest_due_at is None:
            return None
        return max(0.0, (self.at - queue.oldest_due_at).total_seconds())


def take(app: App, failures_window: float = DEFAULT_FAILURES_WINDOW) -> Snapshot:
    """Read every figure, from the rollups and the indexes (never a scan of the
    finished jobs)."""
    store = app.store
    at = store.now()
    queues = app.queues()
    late = [
        (queue.name, queue.oldest_due_at)
        for queue in queues
        if queue.oldest_due_at is not None
        and (at - queue.oldest_due_at).total_seconds() > ASK_WHY_AFTER
    ]
    return Snapshot(
        at=at,
        queues=queues,
        live_workers=store.worker_live_by_queue(DEFAULT_ALIVE_SECONDS),
        tasks=store.stats_figures(),
        schedules=store.schedule_overview(),
        workers=store.worker_list(WORKERS_SHOWN),
        running=store.worker_running_counts(),
        failures=store.job_recent_failures(at - timedelta(seconds=failures_window)),
        failures_window=failures_window,
        limits=app.limit_overview(),
        stuck_workflows=app.stuck_workflows(),
        recycled_workers=store.worker_recycles(),
        unknown_oldest=store.queue_unknown_oldest(late, DEFAULT_ALIVE_SECONDS) if late else {},
    )
