"""Workflows in the database: steps that wait for other steps, released once.

A workflow's steps are ordinary jobs, with edges to the steps they come after
(`due_workflow_edges`). A step whose upstream steps have not all ended is
`waiting` with `upstream_pending` > 0: out of every claim index, holding no
slot. Every operation that ends jobs settles them (settling.py) in the
transaction that records their end; `release` is part of that: each ended
step is counted once on each of its waiting dependents, whose rows are locked
in id order first (on PostgreSQL; SQLite's single writer holds everything).
The row lock serialises ends that count on the same dependent, so exactly one
transaction brings its count to zero, and that transaction queues it, or
cancels it under `on_upstream_failure="cancel"` when an upstream step failed
or was cancelled. A cancelled step is an end in turn: its own dependents are
counted in the same transaction, all the way down. No end is ever recorded
without the release it calls for (invariant 15: one transaction).

Each end is also counted on the workflow, which ends when its last step does:
failed if a step failed, else cancelled if a step was, else succeeded.

Counted once across retries (invariant 18): a retry takes back, from the
steps still waiting, the ends of the steps it runs again (and from the
workflow's counts), so each of them is counted once more when it ends
again, and only then. Every step that did not succeed is retried together,
a step with pieces with its pieces that did not succeed. A workflow is kept
or pruned whole; one pruned in part (by an older version) is not retried.

One lock order (PostgreSQL): job rows first (a parent before its pieces,
steps in id order), the workflow's row last. An acknowledgement locks its
step, then the steps after it, then the workflow; a cancel, a retry, a step
that adds steps and the pruner lock the steps they change in id order, and
the workflow's row after them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from due.core.records import StepRequest
from due.errors import ConfigurationError, InvalidStateError, JobCancelled
from due.store import pieces
from due.store import steps as plans
from due.store.backend import Backend, Columns, Transaction
from due.store.conflicts import retried_on_conflict
from due.store.stats import count_endings

FINAL = ("succeeded", "failed", "cancelled")
UPSTREAM_FAILED = "cancelled: an upstream step failed or was cancelled"

Rows = list[dict[str, Any]]


def ended_steps(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows that are steps of a workflow and have ended."""
    return [row for row in rows if row.get("workflow_id") is not None and row["state"] in FINAL]


def release(
    tx: Transaction, ended: Sequence[Mapping[str, Any]], on_ended: Callable[[Rows], None]
) -> None:
    """Count these ended steps on their dependents and workflows; release the
    dependents now due, cancel those their policy cancels (and so on down).
    The workflows are counted last: their rows are the last locked."""
    steps = ended_steps(ended)
    every: list[Mapping[str, Any]] = []
    while steps:
        every.extend(steps)
        ids = [int(row["id"]) for row in steps]
        if tx.locks_rows:
            tx.run("lock_dependents", {"ids": ids})
        counted = tx.run_each(
            "count_upstream_endings",
            Columns(id=ids, bad=[0 if row["state"] == "succeeded" else 1 for row in steps]),
        )
        ready = {row["id"]: row for row in counted if row["upstream_pending"] == 0}
        cancel = sorted(
            job
            for job, row in ready.items()
            if row["upstream_failed"] and row["on_upstream_failure"] != "run"
        )
        go = sorted(set(ready) - set(cancel))
        if go:
            tx.run("release_steps", {"ids": go, "now": tx.now})
        steps = []
        if cancel:
            params = {"ids": cancel, "now": tx.now, "reason": UPSTREAM_FAILED}
            cancelled = tx.run("cancel_steps", params)
            on_ended(cancelled)
            for row in cancelled:  # a retried step waiting for its upstream steps, with pieces
                if row["pieces_total"]:
                    pieces.cancel_pieces(tx.run, int(row["id"]), tx.instant(), on_ended)
            steps = ended_steps(cancelled)
    if every:
        tx.run_each(
            "count_workflow_endings",
            Columns(
                workflow=[int(row["workflow_id"]) for row in every],
                state=[str(row["state"]) for row in every],
            ),
            {"now": tx.now},
        )


@retried_on_conflict
def enqueue(db: Backend, name: str, steps: Sequence[StepRequest]) -> tuple[int, list[int]]:
    """A workflow and every one of its steps, in one transaction; its id and
    its steps' job ids (in the order given). Steps come in an order where each
    one's upstream steps come before it (`due.workflows` checks the graph)."""
    with db.transaction(unbounded=len(steps) > plans.BULK_CHUNK) as tx:
        params = {"name": name, "total": len(steps), "now": tx.now}
        workflow = int(tx.run("insert_workflow", params)[0]["id"])
        return workflow, _insert_steps(tx, workflow, steps, {})


@retried_on_conflict
def add(db: Backend, adder: int, token: int, steps: Sequence[StepRequest]) -> list[int] | None:
    """Steps a running step adds to its own workflow (fenced by its lease: None
    when it is lost; JobCancelled, nothing added, when it was asked to stop);
    their job ids. Each may come after steps that exist (by name,
    `after_names`) and after steps added before it in the same call."""
    with db.transaction(unbounded=len(steps) > plans.BULK_CHUNK) as tx:
        found = tx.run("step_adder", {"id": adder})
        if not found:
            return None
        workflow = int(found[0]["workflow_id"])
        new_names = [step.name for step in steps]
        after_names = sorted({name for step in steps for name in step.after_names})
        params = {"workflow": workflow, "names": [*new_names, *after_names], "adder": adder}
        locked = tx.run("lock_named_steps", params)
        own = next((row for row in locked if row["id"] == adder), None)
        if own is None or own["state"] != "running" or own["lease_token"] != token:
            return None
        if own["cancel_requested"]:
            # Asked to stop (its workflow cancelled, say): a step added now
            # would run after the cancel, whatever the worker has heard yet.
            raise JobCancelled(f"job {adder} was asked to stop: no step was added")
        named = {row["step_name"]: row for row in locked}
        taken = {name: int(named[name]["id"]) for name in new_names if name in named}
        if taken:
            # Added before (a retried or resumed attempt adds what it added):
            # nothing is added again, and the step's id is given back.
            if len(taken) < len(steps):
                raise ConfigurationError(
                    f"workflow {workflow} has steps named {sorted(taken)} already: add "
                    "them again all together, or none of them"
                )
            return [taken[name] for name in new_names]
        missing = [name for name in after_names if name not in named]
        if missing:
            raise ConfigurationError(
                f"workflow {workflow} has no step named {missing[0]!r} to come after"
            )
        existing = {name: named[name] for name in after_names}
        tx.run("add_workflow_steps", {"id": workflow, "added": len(steps)})
        return _insert_steps(tx, workflow, steps, existing)


def _insert_steps(
    tx: Transaction,
    workflow: int,
    steps: Sequence[StepRequest],
    existing: Mapping[str, Mapping[str, Any]],
) -> list[int]:
    """Insert the steps' jobs, make them steps of `workflow` (waiting for those
    of their upstream steps not ended yet), and their edges."""
    jobs = plans.carry_out(tx, plans.enqueue_steps([step.job for step in steps], tx.now))
    ids = [job.id for job in jobs]
    before = [[existing[name] for name in step.after_names] for step in steps]
    pending = [
        len(step.after) + sum(row["state"] not in FINAL for row in rows)
        for step, rows in zip(steps, before, strict=True)
    ]
    failed = [sum(row["state"] in ("failed", "cancelled") for row in rows) for rows in before]
    tx.run_each(
        "make_steps",
        Columns(
            id=ids,
            name=[step.name for step in steps],
            pending=pending,
            failed=failed,
            policy=[step.on_upstream_failure for step in steps],
        ),
        {"workflow": workflow},
    )
    edges = [
        (ids[upstream], ids[index]) for index, step in enumerate(steps) for upstream in step.after
    ]
    edges += [(int(row["id"]), ids[index]) for index, rows in enumerate(before) for row in rows]
    if edges:
        tx.run_each(
            "insert_edges",
            Columns(upstream=[u for u, _ in edges], step=[s for _, s in edges]),
        )
    doomed = sorted(
        job
        for job, step, wait, bad in zip(ids, steps, pending, failed, strict=True)
        if wait == 0 and bad and step.on_upstream_failure == "cancel"
    )
    if doomed:  # an upstream step it comes after had already failed
        from due.store.settling import settle  # (settling calls this module)

        params = {"ids": doomed, "now": tx.now, "reason": UPSTREAM_FAILED}
        cancelled = tx.run("cancel_steps", params)
        count_endings(tx, cancelled)
        settle(tx, cancelled)
    return ids


def status(db: Backend, workflow_id: int) -> tuple[dict[str, Any], Rows] | None:
    """A workflow's row and its steps' (id, step_name, state, task, after), or None."""
    with db.transaction(read=True) as tx:
        found = tx.run("workflow", {"id": workflow_id})
        if not found:
            return None
        return found[0], tx.run("workflow_steps", {"id": workflow_id})


def upstream_of(db: Backend, job_id: int) -> Rows:
    """What a step's handler reads: each upstream step's name, state and result."""
    with db.transaction(read=True) as tx:
        return tx.run("upstream_of", {"id": job_id})


CANCELLED_BY_HAND = "cancelled with its workflow"


@retried_on_conflict
def cancel(db: Backend, workflow_id: int) -> tuple[list[int], list[int]] | None:
    """Cancel every unfinished step: queued and waiting ones end now, running
    ones are asked to stop. None if no workflow has that id; else the steps
    cancelled and those asked to stop."""
    with db.transaction() as tx:
        if not tx.run("workflow", {"id": workflow_id}):
            return None
        # Its steps first, in id order; its row last, as their ends are counted.
        tx.run("lock_workflow_steps", {"id": workflow_id})
        params = {"id": workflow_id, "now": tx.now, "reason": CANCELLED_BY_HAND}
        ended = tx.run("cancel_workflow_steps", params)
        asked = tx.run("request_cancel_workflow_steps", {"id": workflow_id})
        if ended:
            from due.store.settling import settle  # (settling calls this module)

            count_endings(tx, ended)
            settle(tx, ended)
        if not asked:  # nothing left to end it: it ends now, whatever its counts said
            tx.run("end_settled_workflow", {"id": workflow_id, "now": tx.now})
        return sorted(row["id"] for row in ended), sorted(row["id"] for row in asked)


@retried_on_conflict
def retry(db: Backend, workflow_id: int) -> list[int] | None:
    """Run every failed or cancelled step again (those after steps retried too
    wait for them; a step with pieces runs again with its pieces that did not
    succeed); None if no workflow has that id, else the steps retried.

    Raises:
        InvalidStateError: Some of its steps were pruned: their results are
            gone (nothing is retried).
    """
    with db.transaction() as tx:
        if not tx.run("workflow", {"id": workflow_id}):
            return None
        # Its steps that did not succeed first, in id order: one that ends
        # meanwhile is seen ended by the next statements (which count what each
        # retried step waits for), or it ends after this commit and counts
        # itself on the steps made to wait. Its row is locked last.
        locked = tx.run("lock_retried_steps", {"id": workflow_id})
        found = tx.run("workflow_steps_present", {"id": workflow_id})
        if not found:
            return None  # pruned meanwhile
        _refuse_if_pruned(workflow_id, found[0])
        retried = [row for row in locked if row["state"] in ("failed", "cancelled")]
        if not retried:
            return []
        ids = [int(row["id"]) for row in retried]
        tx.run("retry_workflow_steps", {"ids": ids, "now": tx.now})
        tx.run("uncount_retried_steps", {"ids": ids})
        _retry_pieces(tx, [int(row["id"]) for row in retried if row["pieces_total"]])
        tx.run(
            "uncount_workflow",
            {
                "id": workflow_id,
                "ended": len(ids),
                "failed": sum(row["state"] == "failed" for row in retried),
                "cancelled": sum(row["state"] == "cancelled" for row in retried),
            },
        )
        return sorted(ids)


def _refuse_if_pruned(workflow_id: int, counts: Mapping[str, Any]) -> None:
    """A workflow some of whose steps are gone is not retried: a step run again
    would miss their results, and the workflow could never count its end."""
    total, present = int(counts["steps_total"]), int(counts["present"])
    if present < total:
        raise InvalidStateError(
            f"cannot retry workflow {workflow_id}: {total - present} of its {total} steps "
            "were pruned (their results are gone); enqueue its steps again as a new workflow"
        )


def _retry_pieces(tx: Transaction, parents: list[int]) -> None:
    """The pieces of these retried parents that did not succeed run again, a
    level at a time (a piece with pieces of its own with them); each parent
    counts as ended only its pieces that succeeded."""
    while parents:
        requeued = tx.run("retry_pieces", {"ids": parents, "now": tx.now})
        tx.run("recount_retried_parents", {"ids": parents})
        parents = [int(row["id"]) for row in requeued if row["pieces_total"]]


def prune(tx: Transaction, params: Mapping[str, Any]) -> int:
    """Delete ended workflows older than their outcome's retention, each whole:
    its row, every step and their edges (a step's pieces are jobs of their
    own, pruned by their own retention); how many steps were deleted. A
    workflow retried while this waited for its steps is kept (it runs)."""
    chosen = [int(row["id"]) for row in tx.run("prunable_workflows", params)]
    if not chosen:
        return 0
    tx.run("lock_pruned_steps", {"ids": chosen})
    gone = [int(row["id"]) for row in tx.run("prune_workflows", {**params, "ids": chosen})]
    if not gone:
        return 0
    steps = [int(row["id"]) for row in tx.run("prune_workflow_steps", {"ids": gone})]
    if steps:
        tx.run("prune_workflow_edges", {"ids": steps})
    return len(steps)
