"""Helpers every operation that ends a job shares: lock order and settling.

A job that ends may be a piece or a completion job, or a parent with pieces:
its end is counted on its parent in the same transaction (store/pieces.py).
Where the database locks rows, parents are locked before their pieces, in id
order, by every transaction that touches both: the one lock order that keeps
two such transactions from deadlocking. A single-writer database (SQLite)
holds one lock for the whole transaction instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from due.store import pieces, workflows
from due.store.backend import Transaction
from due.store.stats import count_endings


def lock_parents(tx: Transaction, job_ids: Sequence[int]) -> None:
    """Lock these jobs' parents (and the jobs' own rows when they are parents)."""
    if tx.locks_rows and job_ids:
        tx.run("lock_parents", {"ids": list(job_ids)})


def settle(tx: Transaction, ended: Sequence[dict[str, Any]]) -> None:
    """Count jobs that ended on their parents (and settle those), and steps of
    a workflow on the steps that come after them (and release those), in `tx`;
    nothing to do for jobs without parent, pieces or workflow."""
    also_ended: list[dict[str, Any]] = []

    def counted(rows: list[dict[str, Any]]) -> None:
        count_endings(tx, rows)
        also_ended.extend(rows)

    if any(pieces.concerns_a_parent(row) for row in ended):
        pieces.settle(tx.run, ended, tx.instant(), counted)
    if workflows.ended_steps(ended) or workflows.ended_steps(also_ended):
        workflows.release(tx, [*ended, *also_ended], counted)
