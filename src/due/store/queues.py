"""Queues: pause and resume, and what each holds now."""

from __future__ import annotations

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
