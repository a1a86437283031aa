"""How much a statement reads, counted rather than timed: SQLite's
virtual-machine steps, the rows PostgreSQL's scans read (kept or filtered
out). A statement whose reads grow with jobs it does not return fails a test
that compares two sizes, on any machine."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from typing import Any

from psycopg import sql

import due
from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from due.store.sqlite.backend import QUERIES as SQLITE_QUERIES
from due.store.sqlite.backend import path_from_url

STEP_GRAIN = 100


def reads(app: due.App, query: str, params: Mapping[str, Any], *, backlog: bool = False) -> int:
    """What one run of the store's statement `query` reads. `backlog`: SQLite plans
    as for a big backlog (statistics that say every active job is one queue's,
    queued), the case where it chose its index search worst."""
    if app.url.startswith("sqlite"):
        return sqlite_steps(app.url, SQLITE_QUERIES[query], params, backlog=backlog)
    return postgres_rows_read(app, POSTGRES_QUERIES[query], params)


def sqlite_steps(url: str, statement: str, params: Mapping[str, Any], *, backlog: bool) -> int:
    path = path_from_url(url)
    with sqlite3.connect(path) as conn:
        conn.execute("ANALYZE")  # a planner that knows the table, as after `PRAGMA optimize`
        if backlog:
            (rows,) = conn.execute("SELECT count(*) FROM due_jobs").fetchone()
            columns = len(conn.execute("PRAGMA index_info(due_jobs_claim)").fetchall())
            stat = " ".join(str(n) for n in [rows, rows, rows] + [1] * (columns - 2))
            conn.execute("UPDATE sqlite_stat1 SET stat = ? WHERE idx = 'due_jobs_claim'", (stat,))
    counted = [0]

    def step() -> int:
        counted[0] += 1
        return 0

    with sqlite3.connect(path) as conn:  # a new connection loads the statistics
        conn.set_progress_handler(step, STEP_GRAIN)
        conn.execute(statement, dict(params)).fetchall()
    return counted[0] * STEP_GRAIN


def postgres_rows_read(app: due.App, statement: str, params: Mapping[str, Any]) -> int:
    backend: Any = app.store.backend
    with backend.transaction() as tx:
        tx.cursor.execute("ANALYZE due_jobs")
        tx.cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params)
        (row,) = tx.cursor.fetchall()
    return _rows_read(row["QUERY PLAN"][0]["Plan"])


def _rows_read(node: dict[str, Any]) -> int:
    read = 0
    if "Scan" in node["Node Type"] and node.get("Relation Name") == "due_jobs":
        kept = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        read = kept * node["Actual Loops"]
    return read + sum(_rows_read(child) for child in node.get("Plans", []))


def generic_plan(tx: Any, query: str, params: dict[str, Any]) -> str:
    """The plan PostgreSQL keeps for a statement once psycopg has prepared it
    (after five runs on one connection), whatever the values."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)[sb]", numbered, query)
    values = ", ".join(sql.Literal(params[name]).as_string(tx.cursor.connection) for name in names)
    tx.cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    tx.cursor.execute(f"PREPARE due_generic AS {text}")
    try:
        tx.cursor.execute(f"EXPLAIN EXECUTE due_generic({values})")
        return "\n".join(row["QUERY PLAN"] for row in tx.cursor.fetchall())
    finally:
        tx.cursor.execute("DEALLOCATE due_generic")
