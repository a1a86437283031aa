"""Limits in the claim: who may start, who waits, and letting waiting jobs go.

A limited job (one whose `limits` name a limit) is claimed only here, never by
claim_jobs: its own index holds it until a claim looks at it. The claim locks
the keys its candidates count against, counts each key's running jobs and
recent starts in a statement of its own (seeing every claim that held the key
before), and then leases the candidates that have room and sets the others
waiting, out of every claim index, for the key that had none.

No claim waits for another. Keys are locked SKIP LOCKED (PostgreSQL; SQLite's
one writer holds them all): a candidate that counts against a key another
transaction holds (a claim, a look, or a process frozen in the middle of one)
is left as it is, for a later claim, and the claim looks on past it for up to
`SKIP_ROUNDS` more pages of candidates, so a held key stops only its own jobs.
A key not stored yet is inserted after the claim commits, autocommitted on its
own, and its candidates are claimed then: a claim's transaction never writes a
key another may be writing (two claims that each inserted a key the other then
locked waited for each other, a deadlock). Nothing waits, so the order keys
are locked in does not matter.

Jobs set waiting go back among the claimable ones when their key may have room
again, without a look at every waiting key before every claim (that cost each
claim a count of 200 keys' running jobs, however few ever changed):

- an end frees its slots: whoever wrote it (an acknowledgement, a rescue, a
  release) lets go as many of each key's waiting jobs once the end has
  committed (`let_go_after_ends`; on SQLite in the end's own transaction);
- a rate's window opens at a time the claim wrote (`opens_at`); a claim that
  set a job waiting for a slot asks for a look at once, after its commit (its
  `opens_at` is its now): an end that committed after this claim counted its
  job running found nobody waiting yet, and a look after the commit sees that
  end. Each claim first looks at the keys whose time came (`look_in`);
- new numbers ask for a look at the limit's waiting keys (limits.sync);
- a sweep of every waiting key, a page every few seconds (`sweep`), is the net
  under them all: a process that died between an end and its letting go.

Letting one go too early costs a look, never a slot: the claim counts again.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from due.core.limits import KeyState, decide, decode_job_limits
from due.core.records import CLAIM_COLUMNS
from due.errors import StoreError
from due.store.backend import Backend, Columns, Transaction, Values

Pair = tuple[str, str]
SKIP_ROUNDS = 3
"""Pages of candidates a claim reads past those whose keys others hold."""
LOOK_KEYS = 200
"""Keys whose look is due looked at by one claim, at most."""
SWEEP_KEYS = 1000
"""Waiting keys looked at by one page of the sweep, at most."""
MAX_LET_GO = 1000
"""Jobs of one key let go by one look, at most."""


@dataclass(slots=True)
class LimitedClaim:
    """What a claim of limited jobs leased, and what it left for later."""

    values: Values = (CLAIM_COLUMNS, [])
    start_by: dict[int, float] = field(default_factory=dict)
    """Per leased job counting against a rate: the latest instant (the
    database's, seconds) its handler may begin (core/limits.py)."""
    new_keys: list[Pair] = field(default_factory=list)
    """Keys not stored yet: written after the commit, their jobs claimed then."""
    contended: bool = False
    """It passed over candidates whose key another transaction held."""

    @property
    def leased(self) -> int:
        return len(self.values[1])


def claim_limited(
    tx: Transaction, limit: int, params: dict[str, Any], *, writes_keys: bool
) -> LimitedClaim:
    """Lease up to `limit` of the queue's limited jobs that have room now.
    `writes_keys`: new keys may be written in this transaction (one writer)."""
    claim = LimitedClaim()
    skip: set[Pair] = set()
    for _ in range(1 + SKIP_ROUNDS):
        rows = tx.run(
            "limited_candidates",
            {**params, "limit": limit - claim.leased, "skip": _pairs_json(skip)},
        )
        if not rows:
            break
        candidates = [(row["id"], decode_job_limits(row["limits"])) for row in rows]
        pairs = sorted({pair for _, job_pairs in candidates for pair in job_pairs})
        locked, passed = _lock_keys(tx, pairs, claim, writes_keys=writes_keys)
        ready = [(job, job_pairs) for job, job_pairs in candidates if passed.isdisjoint(job_pairs)]
        if ready:
            _decide(tx, ready, locked, params, claim)
        if len(ready) == len(candidates) or claim.leased >= limit:
            break
        skip |= passed  # the next page: past the jobs of the keys passed over
    return claim


def _lock_keys(
    tx: Transaction, pairs: Sequence[Pair], claim: LimitedClaim, *, writes_keys: bool
) -> tuple[list[Pair], set[Pair]]:
    """The keys locked, and those passed over (held by another, or new)."""
    found = {(row["name"], row["key"]): bool(row["locked"]) for row in _run_keys(tx, pairs)}
    new = [pair for pair in pairs if pair not in found]
    if new and writes_keys:
        tx.run("ensure_limit_keys", _keys_params(new, tx.now))
        found |= {(row["name"], row["key"]): bool(row["locked"]) for row in _run_keys(tx, new)}
        new = [pair for pair in new if pair not in found]
    claim.new_keys += new
    claim.contended |= not all(found.values())
    locked = [pair for pair in pairs if found.get(pair)]
    return locked, set(pairs) - set(locked)


def _run_keys(tx: Transaction, pairs: Sequence[Pair]) -> Iterable[Any]:
    return tx.run("lock_limit_keys", _keys_params(pairs, tx.now))


def _decide(
    tx: Transaction,
    candidates: list[tuple[int, list[Pair]]],
    locked: Sequence[Pair],
    params: dict[str, Any],
    claim: LimitedClaim,
) -> None:
    used = sorted({pair for _, job_pairs in candidates for pair in job_pairs} & set(locked))
    states = {
        (row["name"], row["key"]): KeyState.from_row(row)
        for row in tx.run("limit_key_states", _keys_params(used, tx.now))
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
                opens_at=[state.next_look() for state in changed],
            ),
        )
    if not decision.granted:
        return
    # They started when their starts are logged (the time read after the keys'
    # locks): a job's started_at and its key's window speak of one instant.
    started = max((state.now for state in states.values()), default=None)
    columns, rows = tx.run_values(
        "claim_given", {**params, "ids": decision.granted, "started_s": started}
    )
    claim.values = (columns, [*claim.values[1], *rows])
    claim.start_by.update(decision.start_by)


def write_keys(db: Backend, pairs: Sequence[Pair]) -> None:
    """New keys, in a statement of their own (autocommitted on PostgreSQL)."""
    with db.transaction(single=True) as tx:
        tx.run("ensure_limit_keys", _keys_params(sorted(set(pairs)), tx.now))


# --- letting waiting jobs go ------------------------------------------------------


def let_go_after_ends(tx: Transaction, ended: Collection[int]) -> int:
    """Let go, for each key the ended jobs counted against, as many of its
    waiting jobs as the ends freed slots; returns how many."""
    if not ended:
        return 0
    freed = tx.run("limit_pairs_ended", {"ids": sorted(ended)})
    if not freed:
        return 0
    rows = tx.run_each(
        "unblock_freed",
        Columns(
            name=[row["name"] for row in freed],
            key=[row["key"] for row in freed],
            count=[int(row["slots"]) for row in freed],
        ),
    )
    return len(rows)


def after_ends(db: Backend, ended: Collection[int]) -> int:
    """`let_go_after_ends` in a transaction of its own, once the ends have
    committed. A failure lets nobody go now, and loses nobody: the sweep looks
    at every waiting key within seconds."""
    if not ended:
        return 0
    with contextlib.suppress(StoreError), db.transaction() as tx:
        return let_go_after_ends(tx, ended)
    return 0


_LOOKED_UP_TO: weakref.WeakKeyDictionary[Backend, dict[str, Pair]] = weakref.WeakKeyDictionary()
"""Per store and statement, the last key a look reached: the next goes on from there."""
START: Pair = ("", "")


def look_in(tx: Transaction, db: Backend, *, sweep: bool = False) -> int:
    """Look at the waiting keys whose look is due (a page of every waiting key
    with `sweep`) and let go the jobs of those with room; returns how many."""
    statement, page = ("limit_keys_waiting", SWEEP_KEYS) if sweep else ("limit_keys_due", LOOK_KEYS)
    marks = _LOOKED_UP_TO.setdefault(db, {})
    # A look takes the keys after the last one the previous look reached, in
    # name, key order, and wraps round: however many keys wait without room,
    # every key is looked at within a few looks.
    after = marks.get(statement, START)
    looked = _keys_after(tx, statement, after, page)
    if len(looked) < page and after != START:
        more = _keys_after(tx, statement, START, page - len(looked))
        looked = sorted(set(looked) | set(more))
    marks[statement] = looked[-1] if len(looked) >= page else START
    if not looked:
        return 0
    released = 0
    changed = []
    for row in tx.run("limit_key_states", _keys_params(looked, tx.now)):
        state = KeyState.from_row(row)
        room = min(state.room(), MAX_LET_GO)
        let_go = 0
        if room:
            let_go = len(
                tx.run("unblock_jobs", {"name": state.name, "key": state.key, "count": room})
            )
            released += let_go
        state.granted = let_go  # as if they started now: when the rate opens after them
        # None left, as far as this look knows (the statement checks: a job
        # whose row another transaction held was not let go).
        settled = let_go < room
        opens_at = state.opens_at()
        if settled or opens_at != row["opens_s"]:  # (a key full as it was: nothing to write)
            changed.append((state, settled, opens_at))
    if changed:
        tx.run_each(
            "limit_keys_reopened",
            Columns(
                name=[state.name for state, _, _ in changed],
                key=[state.key for state, _, _ in changed],
                settled=[settled for _, settled, _ in changed],
                block_version=[state.block_version for state, _, _ in changed],
                opens_at=[opens_at for _, _, opens_at in changed],
            ),
        )
    return released


def _keys_after(tx: Transaction, statement: str, after: Pair, limit: int) -> list[Pair]:
    params = {"now": tx.now, "limit": limit, "after_name": after[0], "after_key": after[1]}
    return [(row["name"], row["key"]) for row in tx.run(statement, params)]


def sweep(db: Backend) -> int:
    """A page of every waiting key looked at: jobs of keys with room let go."""
    with db.transaction() as tx:
        return look_in(tx, db, sweep=True)


def _pairs_json(pairs: Collection[Pair]) -> str | None:
    return json.dumps([list(pair) for pair in sorted(pairs)]) if pairs else None


def _keys_params(pairs: Sequence[Pair], now: Any) -> dict[str, Any]:
    return {
        "keys": [list(pair) for pair in pairs],
        "name": [name for name, _ in pairs],
        "key": [key for _, key in pairs],
        "now": now,
    }
