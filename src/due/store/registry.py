"""Who is there: named leases (the scheduler's leadership) and the registry of
worker processes."""

from __future__ import annotations

import json
from typing import Any

from due.core.records import WorkerInfo, WorkerRegistration
from due.store.backend import Backend

# --- leases -------------------------------------------------------------------


def acquire_lease(db: Backend, name: str, holder: str, ttl: float) -> int | None:
    """Take or renew the lease `name`; its token (the term), or None if held by another."""
    with db.transaction(single=True) as tx:
        rows = tx.run("acquire_lease", _lease(name, holder, None, ttl, tx.now))
    return int(rows[0]["token"]) if rows else None


def renew_lease(db: Backend, name: str, holder: str, token: int, ttl: float) -> bool:
    with db.transaction(single=True) as tx:
        return bool(tx.run("renew_lease", _lease(name, holder, token, ttl, tx.now)))


def release_lease(db: Backend, name: str, holder: str, token: int) -> None:
    with db.transaction(single=True) as tx:
        tx.run("release_lease", _lease(name, holder, token, 0, tx.now))


def _lease(name: str, holder: str, token: int | None, ttl: float, now: Any) -> dict[str, Any]:
    return {"name": name, "holder": holder, "token": token, "ttl": float(ttl), "now": now}


# --- workers ------------------------------------------------------------------


def register_worker(db: Backend, registration: WorkerRegistration) -> None:
    """Record a worker process as running, with the queues it serves and the
    tasks it knows."""
    with db.transaction(single=True) as tx:
        params = {
            "id": registration.worker,
            "host": registration.host,
            "pid": registration.pid,
            "queues": json.dumps(dict(registration.queues)),
            "tasks": json.dumps(sorted(registration.tasks)),
            "now": tx.now,
        }
        tx.run("register_worker", params)


def touch_worker(db: Backend, worker: str) -> bool:
    """Record that a worker is alive; False when it is not registered (its row
    was pruned while it was silent: it registers again)."""
    with db.transaction(single=True) as tx:
        return bool(tx.run("touch_worker", {"id": worker, "now": tx.now}))


def set_worker_state(db: Backend, worker: str, state: str, recycled: str | None = None) -> None:
    """Record `stopping` or `stopped`; a stop that ends a recycling (`recycled`:
    its reason) is counted with it, once (due_worker_recycles)."""
    with db.transaction(single=recycled is None) as tx:
        tx.run("set_worker_state", {"id": worker, "state": state, "now": tx.now})
        if recycled is not None:
            tx.run("count_worker_recycle", {"reason": recycled})


def worker_recycles(db: Backend) -> dict[str, int]:
    """How many worker processes ever recycled themselves, by reason."""
    with db.transaction(read=True) as tx:
        return {row["reason"]: int(row["total"]) for row in tx.run("worker_recycles", {})}


def mark_gone_workers(db: Backend, after_seconds: float) -> list[str]:
    """Mark workers silent for `after_seconds` as gone."""
    with db.transaction(single=True) as tx:
        rows = tx.run("mark_gone_workers", {"after": float(after_seconds), "now": tx.now})
    return [row["id"] for row in rows]


def list_workers(db: Backend, limit: int = 100) -> list[WorkerInfo]:
    """Registered workers, newest first."""
    with db.transaction(read=True) as tx:
        rows = tx.run("list_workers", {"limit": limit})
    return [WorkerInfo(**{**row, "tasks": tuple(row["tasks"])}) for row in rows]
