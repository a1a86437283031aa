"""Counting the ends of attempts, in the transaction that records them, and
reading the counts back (the values and the arithmetic are core/stats.py).

Every operation that ends an attempt or a job tells `count_endings` the rows
its statement returned (with their task, queue and state): a completion, a
rescue, a cancel, an unknown task failed, a parent settled by its pieces and
the pieces cancelled with it, a job's own transaction. A success of a
schedule's run is noted on the schedule too, so its last success outlives the
pruning of its jobs. The leader folds old minutes into hours, and old hours
into one row per key, before it prunes jobs (`fold`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from due.core.records import Completion
from due.core.stats import (
    Outcome,
    TaskFigures,
    outcome_of,
    tally,
    task_figures,
    window_starts,
)
from due.store.backend import Backend, Transaction

MINUTES_KEPT = timedelta(hours=2)
"""Minute rows older than this are folded into hour rows."""
HOURS_KEPT = timedelta(hours=48)
"""Hour rows older than this are folded into one row per key ("all")."""


def count_endings(
    tx: Transaction,
    rows: Sequence[Mapping[str, Any]],
    *,
    requeued: Outcome | None = None,
    completions: Mapping[int, Completion] | None = None,
) -> None:
    """Count the ends among `rows` (jobs whose statement just changed their state).

    A job back in the queue counts as `requeued` (retried, or rescued), or not
    at all; a final state counts as itself (a success whose completion carries
    a warning, as warned); a job now waiting or still running is no end.
    """
    endings = []
    succeeded_schedules = set()
    outcomes: dict[tuple[str, bool], Outcome | None] = {}  # outcome_of, once per kind
    for row in rows:
        state = row["state"]
        completion = completions.get(row["id"]) if completions else None
        warned = completion is not None and bool(completion.warning)
        kind = (state, warned)
        if kind in outcomes:
            outcome = outcomes[kind]
        else:
            outcome = outcomes[kind] = outcome_of(state, requeued=requeued, warned=warned)
        if outcome is None:
            continue
        seconds = completion.seconds if completion is not None else row.get("seconds")
        endings.append((row["task"], row["queue"], outcome, seconds))
        if state == "succeeded" and row.get("schedule"):
            succeeded_schedules.add(row["schedule"])
    tallies = sorted(
        tally(endings), key=lambda t: (t.task, t.queue, t.outcome, t.bucket)
    )  # one lock order for every transaction
    if tallies:
        tx.run_each("record_endings", [dataclasses.asdict(t) for t in tallies], {"now": tx.now})
    for name in sorted(succeeded_schedules):
        tx.run("note_schedule_success", {"name": name, "now": tx.now})


def fold(db: Backend) -> None:
    """Fold minute rows older than MINUTES_KEPT into hours, and hour rows older
    than HOURS_KEPT into one row per key (the leader does it before pruning)."""
    with db.transaction() as tx:
        now = tx.instant()
        for span, into, kept in (("minute", "hour", MINUTES_KEPT), ("hour", "all", HOURS_KEPT)):
            params = {"span": span, "into": into, "before": now - kept}
            tx.run("fold_stats", params)
            if db.single_writer:  # PostgreSQL's fold_stats deletes what it moves itself
                tx.run("drop_stats", params)


def figures(db: Backend) -> list[TaskFigures]:
    """Per task and queue: counts and durations over 5 min, 1 h, 24 h and in total."""
    with db.transaction(read=True) as tx:
        starts = window_starts(tx.instant())
        rows = tx.run("job_stats", {f"since_{name}": start for name, start in starts.items()})
    return task_figures(rows)


def recent_failures(db: Backend, since: datetime) -> list[dict[str, Any]]:
    """Jobs that failed for good since `since`: queue, task, failed, last_failed_at."""
    with db.transaction(read=True) as tx:
        return tx.run("recent_failures", {"since": since})


def live_workers(db: Backend, alive_seconds: float) -> dict[str, int]:
    """How many live workers serve each queue."""
    with db.transaction(read=True) as tx:
        rows = tx.run("live_workers", {"alive": float(alive_seconds), "now": tx.now})
    return {row["queue"]: int(row["workers"]) for row in rows}


def running_per_worker(db: Backend) -> dict[str, int]:
    with db.transaction(read=True) as tx:
        return {row["worker"]: int(row["running"]) for row in tx.run("running_per_worker")}
