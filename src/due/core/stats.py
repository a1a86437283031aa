"""Outcome counts and durations: the values of the rollups, and the arithmetic
on them. No I/O.

Every end of an attempt is counted in the database, in the transaction that
records it, in a row per minute, task, queue, outcome and duration bucket
(`due_job_stats`). Deleting finished jobs changes no figure. The leader folds
minute rows older than two hours into one row per hour, and hour rows older
than two days into one row per task, queue, outcome and bucket for all time
(store/stats.py: `MINUTES_KEPT`, `HOURS_KEPT`), so the table stays small and
the totals stay whole: the 5-minute and 1-hour windows are whole minutes, the
24-hour one whole hours.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta


class Outcome(enum.StrEnum):
    """How an attempt ended, as counted."""

    SUCCEEDED = "succeeded"
    WARNED = "warned"
    """Succeeded, but its result failed the task's `check=`: kept, counted, alerted."""
    FAILED = "failed"
    """Failed for good (no attempts left, or an error the task does not retry)."""
    RETRIED = "retried"
    """Failed, and queued again after its backoff."""
    CANCELLED = "cancelled"
    RESCUED = "rescued"
    """Its worker stopped renewing its lease (killed, frozen, cut off)."""


DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 10800.0, 43200.0,
)  # fmt: skip
"""Upper bounds (seconds) of the duration histogram; one more bucket, +Inf, after them."""

NO_DURATION = -1
"""The bucket of an end without a handler's duration (a rescue, a cancel while queued)."""

WINDOWS: dict[str, timedelta] = {
    "5m": timedelta(minutes=5),
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
}
"""The recent windows every figure is given for (and "total", since the start)."""


FINAL_OUTCOMES = {
    "succeeded": Outcome.SUCCEEDED,
    "failed": Outcome.FAILED,
    "cancelled": Outcome.CANCELLED,
}


def outcome_of(state: str, *, requeued: Outcome | None, warned: bool = False) -> Outcome | None:
    """What a job's new state counts as: back in the queue, `requeued` (retried,
    or rescued) or nothing; a final state itself (a success with a warning, as
    warned); waiting, or still running, is no end (None)."""
    outcome = requeued if state == "queued" else FINAL_OUTCOMES.get(state)
    if outcome is Outcome.SUCCEEDED and warned:
        return Outcome.WARNED
    return outcome


def bucket_of(seconds: float | None) -> int:
    """The index of the histogram bucket `seconds` falls in (NO_DURATION for None)."""
    if seconds is None or not math.isfinite(seconds):
        return NO_DURATION
    return bisect.bisect_left(DURATION_BUCKETS, max(seconds, 0.0))


def buckets_of(durations: Iterable[float | None]) -> list[int]:
    """`bucket_of` for each duration, the common one (finite, not negative)
    without a call each: an acknowledgement counts a hundred at a time."""
    return [
        bisect.bisect_left(DURATION_BUCKETS, seconds)
        if seconds is not None and 0.0 <= seconds < math.inf
        else bucket_of(seconds)
        for seconds in durations
    ]


def minute_of(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


@dataclass(frozen=True, slots=True)
class Ending:
    """One end of an attempt, to be counted."""

    task: str
    queue: str
    outcome: Outcome
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Tally:
    """Endings counted together: one row of `due_job_stats`, or its increment."""

    task: str
    queue: str
    outcome: str
    bucket: int
    count: int
    duration_sum: float


def tally(endings: Iterable[Ending | tuple[str, str, Outcome, float | None]]) -> list[Tally]:
    """Endings grouped as they are stored (by task, queue, outcome and bucket).
    An ending may be given as the tuple of its fields: a worker's
    acknowledgement counts a thousand a time, and a frozen dataclass per job
    cost more than the counting."""
    groups: dict[tuple[str, str, str, int], list[float]] = {}
    for ending in endings:
        task, queue, outcome, seconds = (
            ending
            if type(ending) is tuple
            else (ending.task, ending.queue, ending.outcome, ending.seconds)  # type: ignore[union-attr]
        )
        if seconds is not None and 0.0 <= seconds < math.inf:  # bucket_of's common case
            bucket = bisect.bisect_left(DURATION_BUCKETS, seconds)
        else:
            bucket = bucket_of(seconds)
        sums = groups.setdefault((task, queue, outcome.value, bucket), [0, 0.0])
        sums[0] += 1
        sums[1] += seconds or 0.0
    return [
        Tally(task, queue, outcome, bucket, int(count), float(total))
        for (task, queue, outcome, bucket), (count, total) in groups.items()
    ]


@dataclass
class Durations:
    """A duration histogram: counts per bucket (DURATION_BUCKETS, then +Inf)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    total_seconds: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, bucket: int, count: int, seconds: float) -> None:
        if bucket == NO_DURATION:
            return
        self.counts[min(bucket, len(DURATION_BUCKETS))] += count
        self.total_seconds += seconds

    def percentile(self, fraction: float) -> float | None:
        """The upper bound of the bucket holding that fraction of the durations
        (None without any; +Inf past the last bound)."""
        total = self.count
        if total == 0:
            return None
        rank = max(1, math.ceil(fraction * total))
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return DURATION_BUCKETS[index] if index < len(DURATION_BUCKETS) else math.inf
        return math.inf


@dataclass
class Figures:
    """A task's (or any group's) outcomes and durations in one window."""

    counts: dict[str, int] = field(default_factory=lambda: {o.value: 0 for o in Outcome})
    durations: Durations = field(default_factory=Durations)

    def add(self, outcome: str, bucket: int, count: int, seconds: float) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + count
        self.durations.add(bucket, count, seconds)

    def percentiles(self) -> dict[str, float | None]:
        return {
            "p50": self.durations.percentile(0.50),
            "p95": self.durations.percentile(0.95),
            "p99": self.durations.percentile(0.99),
        }


@dataclass
class TaskFigures:
    """Per task and queue: figures over each recent window and since the start."""

    task: str
    queue: str
    windows: dict[str, Figures] = field(default_factory=dict)

    def window(self, name: str) -> Figures:
        return self.windows.setdefault(name, Figures())


def window_starts(now: datetime) -> dict[str, datetime]:
    """The first minute of each recent window: a rollup row counts in a window
    when its minute (or hour) starts at or after it."""
    return {name: minute_of(now - length) for name, length in WINDOWS.items()}


def task_figures(rows: Iterable[Mapping[str, object]]) -> list[TaskFigures]:
    """From rollup sums per (task, queue, outcome, bucket), with `count_<window>`
    and `seconds_<window>` for each window in WINDOWS and "total": figures per
    task and queue, per window."""
    by_task: dict[tuple[str, str], TaskFigures] = {}
    for row in rows:
        key = (str(row["task"]), str(row["queue"]))
        figures = by_task.setdefault(key, TaskFigures(*key))
        outcome, bucket = str(row["outcome"]), int(row["bucket"])  # type: ignore[call-overload]
        for name in (*WINDOWS, "total"):
            count = int(row[f"count_{name}"] or 0)  # type: ignore[call-overload]
            if count:
                seconds = float(row[f"seconds_{name}"] or 0.0)  # type: ignore[arg-type]
                figures.window(name).add(outcome, bucket, count, seconds)
    for figures in by_task.values():
        for name in (*WINDOWS, "total"):
            figures.window(name)
    return [by_task[key] for key in sorted(by_task)]
