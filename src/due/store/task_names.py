"""Task names as the database knows them, without the app: those its
schedules start, its workers serve and its jobs were enqueued for."""

from __future__ import annotations

from due.store.backend import Backend


def in_use(db: Backend, task: str) -> bool:
    """Whether any schedule, worker or stored job names this task."""
    with db.transaction(read=True) as tx:
        return bool(tx.run("task_in_use", {"task": task})[0]["found"])


def known(db: Backend) -> list[str]:
    """Every task name a schedule, worker or stored job holds, sorted."""
    with db.transaction(read=True) as tx:
        return sorted(str(row["name"]) for row in tx.run("known_task_names"))
