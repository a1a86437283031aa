"""Limits in the claim: who may start, who waits, and letting waiting jobs go.

A limited job (one whose `limits` name a limit) is claimed only here, never by
claim_jobs: its own index holds it until a claim looks at it. The claim
locks the keys its candidates count against (in name, key order: claims
never deadlock), counts each key's running jobs and recent starts in a
statement of its own (seeing every claim that held the key before), and
then leases the candidates that have room and sets the others waiting, out
of every claim index, for the key that had none. A reopen updates keys in
the same order; nothing else locks a key: a job's end frees its slot by no
longer running.

Waiting jobs go back when their key has room again (`reopen`, before a
claim: after a job of the key ended, its rate's window moved on, or an
operator raised its numbers). Letting one go too early costs a look, never a
slot: the claim counts again.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from typing import Any

from due.core.limits import (
    KeyState,
    Limit,
    LimitKeyOverview,
    LimitOverview,
    decide,
    decode_job_limits,
    starts_in_window,
)
from due.core.records import CLAIM_COLUMNS, COUNT_LIMIT, ClaimRequest
from due.store.backend import Backend, Columns, Transaction, Values

REOPEN_KEYS_PER_LOOK = 200
"""Keys with waiting jobs looked at by one `reopen`, at most."""
MAX_REOPEN = 1000
"""Jobs of one key let go by one `reopen`, at most."""


def claim_limited(
    tx: Transaction, request: ClaimRequest, limit: int, params: dict[str, Any]
) -> Values:
    """Lease up to `limit` of the queue's limited jobs that have room now."""
    rows = tx.run("limited_candidates", {**params, "limit": limit})
    if not rows:
        return CLAIM_COLUMNS, []
    candidates = [(row["id"], decode_job_limits(row["limits"])) for row in rows]
    pairs = sorted({pair for _, job_pairs in candidates for pair in job_pairs})
    keys = _keys_params(pairs, tx.now)
    if len(tx.run("lock_limit_keys", keys)) < len(pairs):
        tx.run("ensure_limit_keys", keys)
        tx.run("lock_limit_keys", keys)
    states = {
        (row["name"], row["key"]): KeyState.from_row(row)
        for row in tx.run("limit_key_states", keys)
    }
    decision = decide(candidates, states)
    if decision.waiting:
        tx.run_each(
            "block_jobs",
            Columns(
                id=[job for job, _, _ in decision.waiting],
                name=[name for _, name, _ in decision.waiting],
                key=[key for _, _, key in decision.waiting],
            ),
        )
    changed = [state for state in states.values() if state.granted or state.blocked]
    if changed:
        tx.run_each(
            "update_limit_keys",
            Columns(
                name=[state.name for state in changed],
                key=[state.key for state in changed],
                starts=[json.dumps(state.log()) for state in changed],
                started=[state.granted for state in changed],
                blocked=[state.blocked for state in changed],
                opens_at=[state.opens_at() if state.rate_blocked else None for state in changed],
            ),
        )
    if not decision.granted:
        return CLAIM_COLUMNS, []
    # They started when their starts are logged (the time read after the keys'
    # locks): a job's started_at and its key's window speak of one instant.
    started = max((state.now for state in states.values()), default=None)
    return tx.run_values("claim_given", {**params, "ids": decision.granted, "started_s": started})


def reopen(db: Backend) -> int:
    """Let go the jobs waiting for keys that have room again; returns how many."""
    with db.transaction() as tx:
        return reopen_in(tx, db)


_LOOKED_UP_TO: weakref.WeakKeyDictionary[Backend, tuple[str, str]] = weakref.WeakKeyDictionary()
"""Per store, the last key a look reached: the next look goes on from there."""
START = ("", "")


def reopen_in(tx: Transaction, db: Backend) -> int:
    released = 0
    # A look takes the waiting keys after the last one the previous look
    # reached, in name, key order, and wraps round: however many keys wait
    # without room, every key is looked at within a few claims (a look from
    # the start each time would see the same first keys for ever).
    after = _LOOKED_UP_TO.get(db, START)
    looked = _waiting_after(tx, after, REOPEN_KEYS_PER_LOOK)
    if len(looked) < REOPEN_KEYS_PER_LOOK and after != START:
        seen = {(row["name"], row["key"]) for row in looked}
        more = _waiting_after(tx, START, REOPEN_KEYS_PER_LOOK - len(looked))
        looked += [row for row in more if (row["name"], row["key"]) not in seen]
    # Each key is updated (so locked until commit) in name, key order, as a
    # claim locks them: a reopen and a claim, or two reopens, could otherwise
    # each hold a key the other waits for.
    looked.sort(key=lambda row: (row["name"], row["key"]))
    full = len(looked) >= REOPEN_KEYS_PER_LOOK
    _LOOKED_UP_TO[db] = (looked[-1]["name"], looked[-1]["key"]) if full else START
    for row in looked:
        state = KeyState.from_row(row)
        room = min(state.room(), MAX_REOPEN)
        let_go = 0
        if room:
            let_go = len(
                tx.run("unblock_jobs", {"name": state.name, "key": state.key, "count": room})
            )
            released += let_go
        state.granted = let_go  # as if they started now: when the rate opens after them
        tx.run(
            "limit_key_reopened",
            {
                "name": state.name,
                "key": state.key,
                # None left, as far as this look knows (the statement checks:
                # a job whose row another transaction held was not let go).
                "settled": let_go < room,
                "block_version": state.block_version,
                "opens_at": state.opens_at(),
            },
        )
    return released


def _waiting_after(tx: Transaction, after: tuple[str, str], limit: int) -> list[dict[str, Any]]:
    params = {"now": tx.now, "limit": limit, "after_name": after[0], "after_key": after[1]}
    return list(tx.run("limit_keys_waiting", params))


def waiting_keys(db: Backend) -> bool:
    """Whether a key has jobs waiting that may have room now (a cheap look)."""
    with db.transaction(read=True) as tx:
        return bool(_waiting_after(tx, START, 1))


def sync(db: Backend, limits: Sequence[Limit]) -> None:
    """Write the numbers of the limits declared in code (an operator's stay)."""
    if not limits:
        return
    with db.transaction() as tx:
        for limit in limits:
            tx.run(
                "upsert_limit",
                {
                    "name": limit.name,
                    "concurrency": limit.concurrency,
                    "rate": limit.rate,
                    "period": limit.period,
                    "now": tx.now,
                },
            )
            tx.run("limit_keys_look_again", {"name": limit.name})


def set_numbers(db: Backend, limit: Limit) -> bool:
    """An operator's numbers for a limit, until reset; False if it is unknown."""
    with db.transaction() as tx:
        rows = tx.run(
            "set_limit",
            {
                "name": limit.name,
                "concurrency": limit.concurrency,
                "rate": limit.rate,
                "period": limit.period,
                "now": tx.now,
            },
        )
        tx.run("limit_keys_look_again", {"name": limit.name})
    return bool(rows)


def reset_numbers(db: Backend, name: str) -> bool:
    """Back to the numbers in code; False if the limit is unknown."""
    with db.transaction() as tx:
        found = bool(tx.run("reset_limit", {"name": name, "now": tx.now}))
        tx.run("limit_keys_look_again", {"name": name})
        return found


def _keys_params(pairs: Sequence[tuple[str, str]], now: Any) -> dict[str, Any]:
    return {
        "keys": [list(pair) for pair in pairs],
        "name": [name for name, _ in pairs],
        "key": [key for _, key in pairs],
        "now": now,
    }


def overview(db: Backend, *, busiest: int = 5, keys_read: int = 1000) -> list[LimitOverview]:
    """Every stored limit with its figures (see LimitOverview)."""
    found = []
    with db.transaction(read=True) as tx:
        for row in tx.run("limit_overview", {"now": tx.now, "limit": COUNT_LIMIT}):
            numbers = Limit(row["name"], row["concurrency"], row["rate"], row["period"])
            code = Limit(row["name"], row["code_concurrency"], row["code_rate"], row["code_period"])
            keys = [
                LimitKeyOverview(
                    key["key"],
                    int(key["running"]),
                    int(key["waiting"]),
                    starts_in_window(key["starts"], float(key["now_s"]), numbers.period),
                    int(key["started_total"]),
                )
                for key in tx.run(
                    "limit_keys_of",
                    {
                        "name": row["name"],
                        "limit": keys_read,
                        "count_limit": COUNT_LIMIT,
                        "now": tx.now,
                    },
                )
            ]
            found.append(
                LimitOverview(
                    numbers,
                    code,
                    bool(row["overridden"]),
                    int(row["running"]),
                    int(row["waiting"]),
                    sum(key.started_in_window for key in keys),
                    int(row["started_total"]),
                    int(row["keys"]),
                    tuple(keys[:busiest]),
                )
            )
    return found


def key_figures(db: Backend, name: str, key: str) -> tuple[Limit, LimitKeyOverview] | None:
    """One key of a limit: its numbers in force and its figures (None: not stored)."""
    with db.transaction(read=True) as tx:
        rows = tx.run(
            "limit_key_figures",
            {"name": name, "key": key, "now": tx.now, "count_limit": COUNT_LIMIT},
        )
    if not rows:
        return None
    row = rows[0]
    numbers = Limit(name, row["concurrency"], row["rate"], row["period"])
    figures = LimitKeyOverview(
        key,
        int(row["running"]),
        int(row["waiting"]),
        starts_in_window(row["starts"], float(row["now_s"]), numbers.period),
        int(row["started_total"]),
    )
    return numbers, figures
