"""Old backlogs: do a million old due jobs, or a paused backfill's million held
pieces, slow what a worker and an operator do every minute?

    .venv/bin/python bench/backlog_bench.py [--backend sqlite|postgres|both]
                                            [--jobs 1000000] [--repeat 7]

Each backend gets one database, filled by SQL (one statement, not enqueue):

sweep   --jobs queued jobs of a known task, due two hours ago (past the unknown-task
        grace of one hour), 5,000 at each instant (as enqueue_many and batches
        write them), one in 100,000 of a task no worker knows. One sweep of
        the unknown-task reaper (`Store.job_fail_unknown_tasks`): median ms, the
        sweeps a whole pass takes (each reads on from where the last stopped), the
        jobs it failed (all of the unknown task's, by the end of the pass), and
        the median time of an enqueue sent while a sweep runs (on SQLite the sweep
        used to hold the write lock).
look    the same table, then --jobs pieces of a paused group (held, due), older
        than every other job: `app.queues()` (what `due status`, `due check`, the
        dashboard and /metrics read), median ms, before and after the pieces.

One JSON line per result on stdout, also appended to bench/results/results.jsonl.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sqlite3
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due
from due.core.records import UnknownTaskSweep

GRACE = 3600.0
UNKNOWN_EVERY = 100_000
SHARED_RUN_AT = 5_000

SQLITE_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
INSERT INTO due_jobs (task, queue, state, payload, run_at, max_attempts, created_at, timer,
                      held)
SELECT {task}, 'default', 'queued', '{{"args":[],"kwargs":{{}}}}', {run_at}, 3, {now} - 7300,
       0, {held}
FROM n
"""
POSTGRES_FILL = """
INSERT INTO due_jobs (task, queue, state, payload, run_at, max_attempts, created_at, timer,
                      held)
SELECT {task}, 'default', 'queued', '{{"args":[],"kwargs":{{}}}}'::jsonb,
       to_timestamp({run_at}), 3, to_timestamp({now} - 7300), false, {held}
FROM generate_series(1, {count}) AS i
"""


def fill(backend: str, url: str, count: int, *, held: bool) -> float:
    """`count` due jobs two hours old (held pieces: older still), by one statement."""
    now = time.time()
    values = {
        "count": count,
        "now": now,
        "held": "true" if held else "false",
        "task": "'known'"
        if held
        else f"CASE WHEN i % {UNKNOWN_EVERY} = 0 THEN 'gone' ELSE 'known' END",
        # 5,000 jobs share each run_at, as a batch or an enqueue_many writes them.
        "run_at": f"{now} - {10800 if held else 7200} - i / {SHARED_RUN_AT}",
    }
    started = time.perf_counter()
    if backend == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(SQLITE_FILL.format(**values))
            conn.commit()
            conn.execute("ANALYZE")
    else:
        db = url.rsplit("/", 1)[1]
        common.pg_execute(db, POSTGRES_FILL.format(**values))
        common.pg_execute(db, "VACUUM ANALYZE due_jobs")
    return time.perf_counter() - started


def measure_sweeps(app: due.App, known: due.Task[Any, Any]) -> dict[str, Any]:
    sweep = UnknownTaskSweep(["default"], ["known"], GRACE)
    times, failed = [], 0
    while True:
        started = time.perf_counter()
        result = app.store.job_fail_unknown_tasks(sweep)
        times.append(time.perf_counter() - started)
        failed += len(result.failed)
        sweep = dataclasses.replace(sweep, after=result.after)
        if not result.after:
            break
    waits = []
    for _ in range(5):
        sweeping = threading.Thread(target=app.store.job_fail_unknown_tasks, args=(sweep,))
        sweeping.start()
        time.sleep(0.005)  # the sweep has begun
        started = time.perf_counter()
        known.enqueue()
        waits.append(time.perf_counter() - started)
        sweeping.join()
    return {
        "sweep_ms": round(1000 * statistics.median(times), 1),
        "sweeps_per_pass": len(times),
        "failed": failed,
        "enqueue_during_sweep_ms": round(1000 * statistics.median(waits), 1),
    }


def measure_look(app: due.App, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        app.queues()
        times.append(time.perf_counter() - started)
    return round(1000 * statistics.median(times), 1)


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    url = common.fresh_due_url(backend, "backlog")
    app = due.App(url)
    app.migrate()

    @app.task(name="known")
    def known() -> None: ...

    result: dict[str, Any] = {"backend": backend, "jobs": args.jobs}
    result["fill_s"] = round(fill(backend, url, args.jobs, held=False), 1)
    result |= measure_sweeps(app, known)
    result["look_ms"] = measure_look(app, args.repeat)
    result["fill_held_s"] = round(fill(backend, url, args.jobs, held=True), 1)
    result["look_with_held_ms"] = measure_look(app, args.repeat)
    app.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        common.save({"bench": "backlog", "ts": round(time.time(), 3)} | run_backend(backend, args))


if __name__ == "__main__":
    main()
