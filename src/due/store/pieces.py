"""Pieces and their parent: what both backends do when jobs end, written once.

A parent spawns pieces, then waits (`waiting`, holding no worker slot). Each
piece that ends is counted on the parent, in the transaction that records the
piece's end; the parent's row lock serialises pieces that end at the same
instant on different workers, so exactly one transaction sees the last one.
That transaction settles the parent: it starts the completion task (once: its
key is the parent's), or ends the parent. Under `on_piece_failure="fail"` the
first failed piece fails the parent and cancels the pieces still to come;
under `"continue"` failures are counted and reported. A completion task's end
ends its parent the same way, and a parent that ends is counted on its own
parent in turn (pieces may spawn pieces).

A job with pieces that ends any other way than by its pieces (failed,
cancelled, rescued while asked to stop) takes its unfinished pieces and its
completion job with it: nothing runs for a parent that is gone.

Pieces are known by their key (task and arguments): spawning the same item
again, in a retried or resumed attempt, adds nothing.

`settle(execute, ended, now, on_ended)` is driven by the store: `execute(name,
params)` runs a named query of the backend in the open transaction and returns
rows; `on_ended(rows)` is told of the jobs that ended here (parents, and the
pieces cancelled with them), to be counted.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from due.core.records import NewJob

Rows = list[dict[str, Any]]
Execute = Callable[[str, dict[str, Any]], Rows]
OnEnded = Callable[[Rows], None]


def _ignored(rows: Rows) -> None:
    pass


FINAL = ("succeeded", "failed", "cancelled")


def settle(
    execute: Execute, ended: Iterable[dict[str, Any]], now: Any, on_ended: OnEnded = _ignored
) -> None:
    """Count ended jobs on their parents and settle the parents that are done."""
    counts: dict[int, list[int]] = {}
    finishing: list[tuple[int, str, int]] = []
    orphaned: list[int] = []
    cancelled_waiting: list[int] = []
    for row in ended:
        state = row["state"]
        if state in FINAL:
            if row.get("parent_id") is not None:
                tally = counts.setdefault(row["parent_id"], [0, 0])
                tally[0 if state == "succeeded" else 1] += 1
            if row.get("completes") is not None:
                finishing.append((row["completes"], state, row["id"]))
            if row.get("pieces_total"):
                orphaned.append(row["id"])
        elif state == "waiting":
            if row.get("cancel_requested"):
                cancelled_waiting.append(row["id"])  # asked to stop as it began to wait
            else:
                counts.setdefault(row["id"], [0, 0])  # all its pieces may be done already
    for parent in cancelled_waiting:
        finish(execute, parent, "cancelled", "null", "cancelled on request", now, on_ended)
    for parent in sorted(counts):  # one lock order for every transaction
        succeeded, failed = counts[parent]
        if succeeded or failed:
            params = {"parent": parent, "succeeded": succeeded, "failed": failed, "now": now}
            rows = execute("count_piece_endings", params)
        else:
            rows = execute("parent_counts", {"parent": parent})
        if rows:
            settle_parent(execute, rows[0], now, on_ended)
    for parent, state, completion in finishing:
        result = json.dumps({"completion": completion})
        error = None if state == "succeeded" else f"its completion job {completion} {state}"
        finish(execute, parent, state, result, error, now, on_ended)
    for job in orphaned:
        cancel_pieces(execute, job, now, on_ended)


def concerns_a_parent(row: dict[str, Any]) -> bool:
    """Whether a job's end must be settled: it is a piece, a completion, or a parent."""
    return row["state"] == "waiting" or bool(
        row.get("parent_id")
        or row.get("completes")
        or row.get("pieces_total")
        or row.get("workflow_id")
    )


def any_concerns_a_parent(columns: Mapping[str, Sequence[Any]]) -> bool:
    """`concerns_a_parent` for any row of a batch given a column at a time (an
    acknowledgement's: tested in C, without a call per row)."""
    return (
        "waiting" in columns["state"]
        or any(columns["parent_id"])
        or any(columns["completes"])
        or any(columns["pieces_total"])
        or any(columns.get("workflow_id", ()))
    )


def settle_parent(
    execute: Execute, parent: dict[str, Any], now: Any, on_ended: OnEnded = _ignored
) -> None:
    if parent["state"] != "waiting" or parent.get("upstream_pending"):
        # (A step retried with its pieces, waiting for its upstream steps: its
        # pieces may end first; it settles once it has run again.)
        return
    total, done, failed = parent["pieces_total"], parent["pieces_done"], parent["pieces_failed"]
    summary = {"parent": parent["id"], "pieces": total, "succeeded": done, "failed": failed}
    if failed and parent["on_piece_failure"] == "fail":
        error = f"{failed} of {total} pieces did not succeed (on_piece_failure='fail')"
        finish(execute, parent["id"], "failed", json.dumps(summary), error, now, on_ended)
        return
    if done + failed < total:
        return
    if parent["on_complete"]:
        spec = json.loads(parent["on_complete"])
        execute(
            "insert_completion_job",
            {
                "task": spec["task"],
                "queue": spec["queue"],
                "priority": spec["priority"],
                "max_attempts": spec["max_attempts"],
                "stuck_after": spec.get("stuck_after"),
                "payload": json.dumps({"args": [summary], "kwargs": {}}),
                "parent": parent["id"],
                "key": f"due:completes:{parent['id']}",
                "now": now,
            },
        )
        return
    finish(execute, parent["id"], "succeeded", json.dumps(summary), None, now, on_ended)


def finish(
    execute: Execute,
    parent: int,
    state: str,
    result: str,
    error: str | None,
    now: Any,
    on_ended: OnEnded = _ignored,
) -> None:
    """End a waiting parent; unless it succeeded, its unfinished pieces end with it.
    Its end is then counted on its own parent, if it is a piece."""
    params = {"id": parent, "state": state, "result": result, "error": error, "now": now}
    rows = execute("finish_parent", params)
    if not rows:
        return  # not waiting any more: someone settled it first
    on_ended(rows)
    if state != "succeeded":
        cancel_pieces(execute, parent, now, on_ended)
    settle(execute, rows, now, on_ended)


def cancel_pieces(execute: Execute, parent: int, now: Any, on_ended: OnEnded = _ignored) -> None:
    """Cancel a parent's unfinished pieces and its completion job, all the way down:
    queued and waiting ones end now, running ones are asked to stop."""
    nested = [row["id"] for row in execute("waiting_children", {"parent": parent})]
    on_ended(execute("cancel_children", {"parent": parent, "now": now}))
    for child in nested:
        cancel_pieces(execute, child, now, on_ended)


def piece_keys(jobs: Sequence[NewJob]) -> list[str]:
    """Each piece's key among its siblings: its task, queue, priority and
    arguments (however spelled), and which occurrence it is of the same item in
    this call (the same item given twice is two pieces; given again in a later
    call, it is the same piece)."""
    seen: Counter[str] = Counter()
    keys = []
    for job in jobs:
        arguments = job.identity if job.identity is not None else job.payload
        item = f"{job.task}\x00{job.queue}\x00{job.priority}\x00{arguments}"
        digest = hashlib.sha256(item.encode()).hexdigest()[:32]
        seen[digest] += 1
        keys.append(f"{digest}:{seen[digest]}")
    return keys


def completion_spec(
    task: str, queue: str, priority: int, max_attempts: int, stuck_after: float | None
) -> str:
    """How a parent stores its completion task (what settle needs to enqueue it)."""
    return json.dumps(
        {
            "task": task,
            "queue": queue,
            "priority": priority,
            "max_attempts": max_attempts,
            "stuck_after": stuck_after,
        }
    )
