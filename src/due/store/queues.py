"""Queues: pause and resume, and what each holds now."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from due.core.records import COUNT_LIMIT, QueueOverview, queue_overviews
from due.store.backend import Backend


def pause(db: Backend, queue: str, paused: bool) -> None:
    with db.transaction(single=True) as tx:
        tx.run("set_queue_paused", {"name": queue, "paused": paused, "now": tx.now})


def overview(db: Backend, limit: int = COUNT_LIMIT) -> list[QueueOverview]:
    """Every queue with jobs (active or failed), paused, served or scheduled;
    each figure counted up to `limit` (past it: "at least", see COUNT_LIMIT)."""
    with db.transaction(read=True) as tx:
        paused = {row["name"]: bool(row["paused"]) for row in tx.run("queue_states")}
        rows = tx.run("queue_overview", {"now": tx.now, "limit": limit + 1})
        stuck = {row["queue"]: row["stuck"] for row in tx.run("queue_stuck", {"now": tx.now})}
        known = [row["name"] for row in tx.run("known_queue_names")]
    for row in rows:
        row["stuck"] = stuck.get(row["queue"], 0)
    return queue_overviews(rows, paused, known, limit)


def in_use(db: Backend, queue: str) -> bool:
    """Whether any job, pause, worker or schedule names this queue."""
    with db.transaction(read=True) as tx:
        return bool(tx.run("queue_in_use", {"queue": queue})[0]["found"])


def unknown_oldest(
    db: Backend, oldest: Sequence[tuple[str, datetime]], alive_seconds: float
) -> dict[str, str]:
    """Of the queues given with their oldest due job's time, those whose oldest
    due job is of a task no live worker of the queue knows: queue -> task."""
    found = {}
    with db.transaction(read=True) as tx:
        for queue, run_at in oldest:
            params = {"queue": queue, "run_at": run_at, "alive": alive_seconds, "now": tx.now}
            rows = tx.run("oldest_due_job", params)
            if rows and not rows[0]["known"]:
                found[queue] = rows[0]["task"]
    return found
