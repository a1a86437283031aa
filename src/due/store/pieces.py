"""Pieces and their parent: what both backends do when jobs end, written once.

A parent spawns pieces, then waits (`waiting`, holding no worker slot). Each
piece that ends is counted on the parent, in the transaction that records the
piece's end; the parent's row lock serialises pieces that end at the same
instant on different workers, so exactly one transaction sees the last one.
That transaction settles the parent: it starts the completion task (once: its
key is the parent's), or ends the parent. Under `on_piece_failure="fail"` the
first failed piece fails the parent and cancels the pieces still to come;
under `"continue"` failures are counted and reported. A completion task's end
ends its parent the same way.

`settle(execute, ended, now)` is driven by the store: `execute(name, params)`
runs a named query of the backend in the open transaction and returns rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

Rows = list[dict[str, Any]]
Execute = Callable[[str, dict[str, Any]], Rows]
FINAL = ("succeeded", "failed", "cancelled")


def settle(execute: Execute, ended: Iterable[dict[str, Any]], now: Any) -> None:
    """Count ended jobs on their parents and settle the parents that are done."""
    counts: dict[int, list[int]] = {}
    finishing: list[tuple[int, str, int]] = []
    for row in ended:
        state = row["state"]
        if row.get("parent_id") is not None and state in FINAL:
            tally = counts.setdefault(row["parent_id"], [0, 0])
            tally[0 if state == "succeeded" else 1] += 1
        if row.get("completes") is not None and state in FINAL:
            finishing.append((row["completes"], state, row["id"]))
        if state == "waiting":
            counts.setdefault(row["id"], [0, 0])  # a parent that just started waiting
    for parent in sorted(counts):  # one lock order for every transaction
        succeeded, failed = counts[parent]
        if succeeded or failed:
            params = {"parent": parent, "succeeded": succeeded, "failed": failed, "now": now}
            rows = execute("count_piece_endings", params)
        else:
            rows = execute("parent_counts", {"parent": parent})
        if rows:
            settle_parent(execute, rows[0], now)
    for parent, state, completion in finishing:
        result = json.dumps({"completion": completion})
        error = None if state == "succeeded" else f"its completion job {completion} {state}"
        finish(execute, parent, state, result, error, now)


def settle_parent(execute: Execute, parent: dict[str, Any], now: Any) -> None:
    if parent["state"] != "waiting":
        return
    total, done, failed = parent["pieces_total"], parent["pieces_done"], parent["pieces_failed"]
    summary = {"parent": parent["id"], "pieces": total, "succeeded": done, "failed": failed}
    if failed and parent["on_piece_failure"] == "fail":
        error = f"{failed} of {total} pieces did not succeed (on_piece_failure='fail')"
        finish(execute, parent["id"], "failed", json.dumps(summary), error, now)
        execute("cancel_children", {"parent": parent["id"], "now": now})
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
                "payload": json.dumps({"args": [summary], "kwargs": {}}),
                "parent": parent["id"],
                "key": f"due:completes:{parent['id']}",
                "now": now,
            },
        )
        return
    finish(execute, parent["id"], "succeeded", json.dumps(summary), None, now)


def finish(
    execute: Execute, parent: int, state: str, result: str, error: str | None, now: Any
) -> None:
    params = {"id": parent, "state": state, "result": result, "error": error, "now": now}
    execute("finish_parent", params)


def completion_spec(task: str, queue: str, priority: int, max_attempts: int) -> str:
    """How a parent stores its completion task (what settle needs to enqueue it)."""
    return json.dumps(
        {"task": task, "queue": queue, "priority": priority, "max_attempts": max_attempts}
    )
