"""Limits' numbers and figures: the code's and an operator's numbers, and what
`due limit`, the dashboard and the metrics show (the claim: limit_claims.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from due.core.limits import Limit, LimitKeyOverview, LimitOverview, starts_in_window
from due.core.records import COUNT_LIMIT
from due.store.backend import Backend


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
            tx.run("limit_keys_look_again", {"name": limit.name, "now": tx.now})


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
        tx.run("limit_keys_look_again", {"name": limit.name, "now": tx.now})
    return bool(rows)


def reset_numbers(db: Backend, name: str) -> bool:
    """Back to the numbers in code; False if the limit is unknown."""
    with db.transaction() as tx:
        found = bool(tx.run("reset_limit", {"name": name, "now": tx.now}))
        tx.run("limit_keys_look_again", {"name": name, "now": tx.now})
        return found


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
