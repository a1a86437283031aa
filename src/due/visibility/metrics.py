"""The figures for Prometheus: read from the database at each scrape, so any
number of `due metrics` processes (or dashboards) on any host serve the same.

| metric | type | labels |
|---|---|---|
| `due_jobs_total` | counter | task, queue, outcome (see core.stats.Outcome) |
| `due_job_duration_seconds` | histogram | task, queue |
| `due_queue_jobs` | gauge | queue, state (QUEUE_STATES below) |
| `due_queue_jobs_at_least` | gauge | queue, state: 1 when due_queue_jobs reached its limit |
| `due_queue_paused` | gauge | queue |
| `due_queue_oldest_due_age_seconds` | gauge | queue |
| `due_schedule_last_success_timestamp_seconds` | gauge | schedule |
| `due_schedule_next_run_timestamp_seconds` | gauge | schedule |
| `due_schedule_missed_total` | counter | schedule |
| `due_workers_alive` | gauge | queue |
| `due_worker_recycles_total` | counter | reason (RECYCLE_REASONS below) |
| `due_limit_running` | gauge | limit |
| `due_limit_starts_total` | counter | limit |
| `due_limit_waiting_jobs` | gauge | limit |
| `due_alerts` | gauge | severity (what `due check` would report) |

Counts and durations come from the rollups (they survive pruning); a scrape
never scans the jobs table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from due.core.records import COUNT_LIMIT
from due.core.stats import DURATION_BUCKETS
from due.visibility.alerts import AlertRules, Severity, evaluate
from due.visibility.snapshot import Snapshot, take

if TYPE_CHECKING:
    from due.app import App

RECYCLE_REASONS = ("jobs", "memory")
"""Why a worker process recycled itself (worker/recycling.py), each always shown."""
QUEUE_STATES = ("queued", "due", "scheduled", "running", "waiting", "retrying", "failed", "stuck")


class DueCollector(Collector):
    """Collects a fresh snapshot at every scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot], rules: AlertRules) -> None:
        self._snapshot = snapshot
        self._rules = rules

    def collect(self) -> Iterator[Metric]:
        yield from families(self._snapshot(), self._rules)


def registry_for(app: App) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DueCollector(lambda: take(app), app.alert_rules()))
    return registry


def families(snapshot: Snapshot, rules: AlertRules) -> Iterator[Metric]:
    jobs = CounterMetricFamily(
        "due_jobs", "Ends of attempts, by outcome", labels=["task", "queue", "outcome"]
    )
    durations = HistogramMetricFamily(
        "due_job_duration_seconds",
        "How long handlers ran (every outcome with a duration)",
        labels=["task", "queue"],
    )
    for figures in snapshot.tasks:
        total = figures.window("total")
        for outcome, count in sorted(total.counts.items()):
            jobs.add_metric([figures.task, figures.queue, outcome], count)
        cumulative, buckets = 0, []
        bounds = (*DURATION_BUCKETS, float("inf"))
        for bound, count in zip(bounds, total.durations.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", cumulative))
        durations.add_metric(
            [figures.task, figures.queue], buckets, sum_value=total.durations.total_seconds
        )
    yield jobs
    yield durations
    yield from _queue_families(snapshot)
    yield from _schedule_families(snapshot)
    yield from _limit_families(snapshot)
    recycles = CounterMetricFamily(
        "due_worker_recycles",
        "Worker processes that recycled themselves past a limit, by reason",
        labels=["reason"],
    )
    for reason in RECYCLE_REASONS:
        recycles.add_metric([reason], snapshot.recycled_workers.get(reason, 0))
    yield recycles
    alerts = GaugeMetricFamily(
        "due_alerts", "Active alerts (what `due check` reports)", labels=["severity"]
    )
    raised = evaluate(snapshot, rules)
    for severity in (Severity.WARNING, Severity.CRITICAL):
        alerts.add_metric([severity.name.lower()], sum(1 for a in raised if a.severity == severity))
    yield alerts


def _queue_families(snapshot: Snapshot) -> Iterator[Metric]:
    jobs = GaugeMetricFamily(
        "due_queue_jobs", "Jobs per queue and state", labels=["queue", "state"]
    )
    at_least = GaugeMetricFamily(
        "due_queue_jobs_at_least",
        f"1 when due_queue_jobs stopped counting at its limit ({COUNT_LIMIT}): at least that many",
        labels=["queue", "state"],
    )
    paused = GaugeMetricFamily("due_queue_paused", "1 when the queue is paused", labels=["queue"])
    age = GaugeMetricFamily(
        "due_queue_oldest_due_age_seconds",
        "How long the queue's oldest due job has waited (0 when none is due)",
        labels=["queue"],
    )
    workers = GaugeMetricFamily(
        "due_workers_alive", "Live workers serving the queue", labels=["queue"]
    )
    for queue in snapshot.queues:
        values = {
            "queued": queue.queued,
            "due": queue.due,
            "scheduled": queue.scheduled,
            "running": queue.running,
            "waiting": queue.waiting,
            "retrying": queue.retrying,
            "failed": queue.failed,
            "stuck": queue.stuck,
        }
        for state in QUEUE_STATES:
            jobs.add_metric([queue.name, state], values[state])
            at_least.add_metric([queue.name, state], 1 if state in queue.at_least else 0)
        paused.add_metric([queue.name], 1 if queue.paused else 0)
        age.add_metric([queue.name], snapshot.oldest_due_age(queue) or 0.0)
        workers.add_metric([queue.name], snapshot.live_workers.get(queue.name, 0))
    yield from (jobs, at_least, paused, age, workers)


def _schedule_families(snapshot: Snapshot) -> Iterator[Metric]:
    success = GaugeMetricFamily(
        "due_schedule_last_success_timestamp_seconds",
        "When a run of the schedule last succeeded (Unix seconds)",
        labels=["schedule"],
    )
    upcoming = GaugeMetricFamily(
        "due_schedule_next_run_timestamp_seconds",
        "The schedule's next time (Unix seconds)",
        labels=["schedule"],
    )
    missed = CounterMetricFamily(
        "due_schedule_missed", "Scheduled times missed (misfire policy)", labels=["schedule"]
    )
    for overview in snapshot.schedules:
        name = overview.stored.name
        if overview.last_success_at is not None:
            success.add_metric([name], overview.last_success_at.timestamp())
        upcoming.add_metric([name], overview.stored.next_fire_at.timestamp())
        missed.add_metric([name], overview.missed_total)
    yield from (success, upcoming, missed)


def _limit_families(snapshot: Snapshot) -> Iterator[Metric]:
    running = GaugeMetricFamily(
        "due_limit_running", "Jobs running against the limit now", labels=["limit"]
    )
    starts = CounterMetricFamily(
        "due_limit_starts", "Jobs started against the limit, ever", labels=["limit"]
    )
    waiting = GaugeMetricFamily(
        "due_limit_waiting_jobs",
        f"Queued jobs waiting for the limit to have room (counted up to {COUNT_LIMIT})",
        labels=["limit"],
    )
    for overview in snapshot.limits:
        running.add_metric([overview.name], overview.running)
        starts.add_metric([overview.name], overview.started_total)
        waiting.add_metric([overview.name], overview.waiting)
    yield from (running, starts, waiting)
