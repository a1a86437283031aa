"""What visibility reads of workflows: the recent ones, and those that cannot
advance (a step waiting with every upstream step ended, nothing queued or
running: invariant 15 says this never happens, `due check` says if it does)."""

from __future__ import annotations

from typing import Any

from due.store.backend import Backend

Rows = list[dict[str, Any]]


def recent(db: Backend, limit: int) -> Rows:
    """The newest workflows first: id, name, state, step counts, times."""
    with db.transaction(read=True) as tx:
        return tx.run("recent_workflows", {"limit": limit})


def stuck(db: Backend, limit: int) -> Rows:
    """Running workflows that cannot advance: id, name and a stuck step's name."""
    with db.transaction(read=True) as tx:
        return tx.run("stuck_workflows", {"limit": limit})
