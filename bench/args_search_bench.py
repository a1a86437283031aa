"""Finding a customer's jobs: how long `app.jobs(args_contains=...)` takes on a
big table, without an index (as due ships) and, on PostgreSQL, with GIN
indexes on the arguments (what an operator may add); and what those indexes
cost an enqueue.

    .venv/bin/python bench/args_search_bench.py [--backend sqlite|postgres|both]
                                                [--jobs 1000000] [--repeat 5]

Each backend gets one database, filled by SQL (one statement, not enqueue):
--jobs succeeded jobs whose keyword arguments are {"customer_id": i % 100000,
"kind": "csv"}: ten jobs of customer 42 per million.

search      app.jobs(args_contains={"customer_id": 42}, limit=50): median ms
            (it reads every job: no index serves it)
search_none the same for a customer with no job (the whole table, too)
enqueue     one enqueue, median ms of 300; and enqueue_many of 10,000, median ms
indexed     on PostgreSQL, the same with GIN indexes (jsonb_path_ops) on
            payload -> 'kwargs' and payload -> 'args': search ms, their size,
            and the enqueue times with them

One JSON line per result on stdout, also appended to bench/results/results.jsonl.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due

CUSTOMERS = 100_000
SQLITE_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
INSERT INTO due_jobs (task, queue, state, payload, run_at, max_attempts, created_at, finished_at)
SELECT 'export', 'default', 'succeeded',
       '{{"args":[],"kwargs":{{"customer_id":' || (i % {customers}) || ',"kind":"csv"}}}}',
       {now}, 20, {now}, {now}
FROM n
"""
POSTGRES_FILL = """
INSERT INTO due_jobs (task, queue, state, payload, run_at, max_attempts, created_at, finished_at)
SELECT 'export', 'default', 'succeeded',
       jsonb_build_object('args', '[]'::jsonb, 'kwargs',
                          jsonb_build_object('customer_id', i % {customers}, 'kind', 'csv')),
       now(), 20, now(), now()
FROM generate_series(1, {count}) AS i
"""
INDEXES = [
    "CREATE INDEX bench_args_kwargs ON due_jobs USING gin ((payload -> 'kwargs') jsonb_path_ops)",
    "CREATE INDEX bench_args_args ON due_jobs USING gin ((payload -> 'args') jsonb_path_ops)",
]


def fill(backend: str, url: str, count: int) -> float:
    started = time.perf_counter()
    values = {"count": count, "customers": CUSTOMERS, "now": time.time()}
    if backend == "sqlite":
        path = url.removeprefix("sqlite:///")
        common.sqlite_scalar(path, SQLITE_FILL.format(**values))
        common.sqlite_scalar(path, "ANALYZE")
    else:
        db = url.rsplit("/", 1)[1]
        common.pg_execute(db, POSTGRES_FILL.format(**values))
        common.pg_execute(db, "VACUUM ANALYZE due_jobs")
    return time.perf_counter() - started


def median_ms(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return round(1000 * statistics.median(times), 2)


def searches(app: due.App, repeat: int) -> dict[str, Any]:
    found = len(app.jobs(args_contains={"customer_id": 42}, limit=50))
    return {
        "found": found,
        "search_ms": median_ms(lambda: app.jobs(args_contains={"customer_id": 42}), repeat),
        "search_none_ms": median_ms(lambda: app.jobs(args_contains={"customer_id": -1}), repeat),
    }


def enqueues(app: due.App, export: due.Task) -> dict[str, Any]:
    one = median_ms(lambda: export.enqueue(customer_id=1), 300)
    many = median_ms(
        lambda: app.enqueue_many([export.request(customer_id=n) for n in range(10_000)]), 3
    )
    return {"enqueue_ms": one, "enqueue_many_10000_ms": many}


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    url = common.fresh_due_url(backend, "args_search")
    app = due.App(url)
    app.migrate()

    @app.task(name="export")
    def export(customer_id: int = 0, kind: str = "") -> None: ...

    result: dict[str, Any] = {"backend": backend, "jobs": args.jobs}
    result["fill_s"] = round(fill(backend, url, args.jobs), 1)
    result |= searches(app, args.repeat)
    result |= enqueues(app, export)
    if backend == "postgres":
        db = url.rsplit("/", 1)[1]
        for statement in INDEXES:
            common.pg_execute(db, statement)
        common.pg_execute(db, "ANALYZE due_jobs")
        size = common.pg_scalar(
            db,
            "SELECT pg_relation_size('bench_args_kwargs') + pg_relation_size('bench_args_args')",
        )
        result["index_mb"] = round(size / 2**20, 1)
        result["indexed"] = searches(app, args.repeat) | enqueues(app, export)
    app.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        record = {"bench": "args_search", "ts": round(time.time(), 3)}
        common.save(record | run_backend(backend, args))


if __name__ == "__main__":
    main()
