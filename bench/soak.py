"""The soak run: a steady load for half an hour, and whether anything decays.

    .venv/bin/python bench/soak.py [--minutes 30] [--rate 1000] [--backend postgres|sqlite]
    make soak [SOAK_MINUTES=30] [SOAK_BACKEND=postgres]

One `due worker` (concurrency 50, with its scheduler, so its leader folds the
counts and prunes: succeeded jobs are kept --retention, 2 minutes by default,
so the table reaches its steady size early in the run) works a queue that this
process feeds at --rate jobs/s (a batch of rate/50 every 20 ms, on a fixed
timeline that starts once the worker has run its first job). Every 10 s it
records what the database shows:

- acknowledged jobs/s (the success counts the workers write with each end);
- claim latency: started_at - created_at of every 10th job enqueued (p50, p99);
- the jobs table: rows and bytes (PostgreSQL: with its indexes and TOAST; live
  and dead tuples, autovacuum runs; SQLite: the file and its WAL, free pages).

At the end, the first five minutes against the last five: acknowledged jobs/s
and claim latency p99 within 10 % (latency: or within 2 ms, below which this
machine's scheduling noise dominates), and the table's size over the last third
of the run within 10 % of its size at two thirds (it stopped growing). Exit 1
when any of these fails. One JSON line per window on stdout, also appended to
bench/results/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due

WINDOW_SECONDS = 10.0
LATENCY_DELAY = 2.0
"""A window's claim latencies are read this long after it closes (its last
jobs have started by then)."""
MIN_MINUTES = 3 * WINDOW_SECONDS / 60
TICK_SECONDS = 0.02
SAMPLE_EVERY = 10


def make_app(url: str) -> tuple[due.App, due.Task[Any, Any]]:
    app = due.App(url)

    @app.task(name="soak_job")
    async def soak_job(n: int) -> None: ...

    return app, soak_job


# The worker process imports this module by name and takes `app` from it.
if os.environ.get("DUE_SOAK_URL"):
    app, _ = make_app(os.environ["DUE_SOAK_URL"])


def start_worker(url: str, retention: str, log: Path) -> subprocess.Popen[bytes]:
    return common.spawn_due_worker(
        "soak", "DUE_SOAK_URL", url, log,
        "-c", "50", "--retention-succeeded", retention, "--log-level", "warning",
    )  # fmt: skip


class Database:
    """What the soak reads from the job database, outside due."""

    def __init__(self, url: str) -> None:
        self.sqlite = url.startswith("sqlite")
        self.path = url.split(":///", 1)[1] if self.sqlite else ""
        if self.sqlite:
            self.conn: Any = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        else:
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)

    def acknowledged(self) -> int:
        row = self.conn.execute(
            "SELECT coalesce(sum(count), 0) FROM due_job_stats WHERE outcome = 'succeeded'"
        ).fetchone()
        return int(row[0])

    def latencies(self, ids: list[int]) -> list[float]:
        if not ids:
            return []
        if self.sqlite:
            marks = ",".join("?" * len(ids))
            query = (
                "SELECT started_at - created_at FROM due_jobs "
                f"WHERE id IN ({marks}) AND started_at IS NOT NULL"
            )
            return [row[0] for row in self.conn.execute(query, ids)]
        query = (
            "SELECT extract(epoch FROM started_at - created_at)::float8 FROM due_jobs "
            "WHERE id = ANY(%s) AND started_at IS NOT NULL"
        )
        return [row[0] for row in self.conn.execute(query, (ids,))]

    def table(self) -> dict[str, Any]:
        if self.sqlite:
            rows = self.conn.execute("SELECT count(*) FROM due_jobs").fetchone()[0]
            page_size = self.conn.execute("PRAGMA page_size").fetchone()[0]
            pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
            free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
            wal = Path(f"{self.path}-wal")
            return {
                "rows": rows,
                "bytes": pages * page_size,
                "used_bytes": (pages - free) * page_size,
                "wal_bytes": wal.stat().st_size if wal.exists() else 0,
            }
        row = self.conn.execute(
            "SELECT pg_total_relation_size('due_jobs'), n_live_tup, n_dead_tup, "
            "autovacuum_count, autoanalyze_count "
            "FROM pg_stat_user_tables WHERE relid = 'due_jobs'::regclass"
        ).fetchone()
        return {
            "bytes": row[0],
            "rows": row[1],
            "dead_rows": row[2],
            "autovacuums": row[3],
            "autoanalyzes": row[4],
        }

    def close(self) -> None:
        self.conn.close()


@dataclass
class Window:
    start: float
    enqueued: int = 0
    sampled: list[int] = field(default_factory=list)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def record(rec: dict[str, Any]) -> None:
    line = json.dumps(rec)
    print(line, flush=True)
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with (common.RESULTS_DIR / "results.jsonl").open("a") as out:
        out.write(line + "\n")


def soak(args: argparse.Namespace) -> list[dict[str, Any]]:
    url = common.fresh_due_url(args.backend, "soak")
    app, task = make_app(url)
    app.migrate()
    log = common.WORK_DIR / "logs" / f"soak-{args.backend}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    worker = start_worker(url, args.retention, log)
    db = Database(url)
    per_tick = max(1, round(args.rate * TICK_SECONDS))
    windows: list[dict[str, Any]] = []
    pending: list[tuple[Window, float, int]] = []  # read each window's latencies 2 s late
    counter = 0
    planned = round(args.minutes * 60 / WINDOW_SECONDS)
    try:
        wait_until_working(db, task)
        started = time.monotonic()
        window = Window(started)
        acked_before = db.acknowledged()
        tick = started
        while len(windows) + len(pending) < planned:
            now = time.monotonic()
            if now < tick:
                time.sleep(tick - now)
            jobs = app.enqueue_many([task.request(counter + n) for n in range(per_tick)])
            counter += per_tick
            window.enqueued += per_tick
            window.sampled.extend(job.id for job in jobs[::SAMPLE_EVERY])
            tick += TICK_SECONDS
            if time.monotonic() - window.start >= WINDOW_SECONDS:
                acked = db.acknowledged()
                pending.append((window, time.monotonic(), acked - acked_before))
                acked_before = acked
                window = Window(time.monotonic())
            while pending and time.monotonic() - pending[0][1] >= LATENCY_DELAY:
                windows.append(report(db, pending.pop(0), started, args.backend))
        # The windows closed in the last seconds: their jobs have had as long.
        for closed in pending:
            time.sleep(max(0.0, closed[1] + LATENCY_DELAY - time.monotonic()))
            windows.append(report(db, closed, started, args.backend))
    finally:
        common.stop_due_worker(worker)
        db.close()
        app.close()
    return windows


def wait_until_working(db: Database, task: due.Task[Any, Any], timeout: float = 60.0) -> None:
    """The timeline starts once the worker has run a job: its start-up is not
    the first window's latency."""
    task.enqueue(-1)
    deadline = time.monotonic() + timeout
    while db.acknowledged() < 1:
        if time.monotonic() > deadline:
            raise SystemExit(f"the soak worker ran no job within {timeout:g} s")
        time.sleep(0.05)


def report(
    db: Database, closed: tuple[Window, float, int], started: float, backend: str
) -> dict[str, Any]:
    """A closed window's line, its latencies read now (LATENCY_DELAY after it)."""
    done, closed_at, acked_in_window = closed
    latencies = db.latencies(done.sampled)
    seconds = closed_at - done.start
    rec = {
        "bench": "soak",
        "backend": backend,
        "minute": round((done.start - started) / 60, 2),
        "enqueued_per_s": done.enqueued / seconds,
        "acknowledged_per_s": acked_in_window / seconds,
        "claim_p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "claim_p99_ms": 1000 * percentile(latencies, 0.99),
        "latencies": latencies,
        **db.table(),
    }
    record({k: v for k, v in rec.items() if k != "latencies"})
    return rec


def verdict(windows: list[dict[str, Any]], minutes: float) -> tuple[list[str], bool]:
    """The first and last `span` minutes compared, and the table's size in the
    last third of the windows against its size at two thirds (by position: a
    window's start is a little after its nominal minute)."""
    span = min(5.0, minutes / 3)
    first = [w for w in windows if w["minute"] < span]
    last = [w for w in windows if w["minute"] >= minutes - span - WINDOW_SECONDS / 60]
    two_thirds = 2 * len(windows) // 3

    def rate(ws: list[dict[str, Any]]) -> float:
        return statistics.mean(w["acknowledged_per_s"] for w in ws)

    def p99(ws: list[dict[str, Any]]) -> float:
        return 1000 * percentile([x for w in ws for x in w["latencies"]], 0.99)

    size_at_two_thirds = windows[two_thirds - 1]["bytes"]
    size_max_after = max(w["bytes"] for w in windows[two_thirds:])
    checks = [
        ("acknowledged jobs/s", rate(first), rate(last), abs(rate(last) / rate(first) - 1) <= 0.10),
        (
            "claim latency p99 ms",
            p99(first),
            p99(last),
            p99(last) <= max(1.10 * p99(first), p99(first) + 2.0),
        ),
        (
            "jobs table bytes (2/3 of the run, largest after)",
            size_at_two_thirds,
            size_max_after,
            size_max_after <= 1.10 * size_at_two_thirds,
        ),
    ]
    if "dead_rows" in windows[0]:
        # Bounded, not level: each prune leaves tens of thousands of dead rows
        # until the next vacuum, so a window's count saws with the pruner's
        # minute. Growth shows as the last third's peak and median above the
        # rest's.
        third = len(windows) // 3
        before = [w["dead_rows"] for w in windows[: 2 * third]]
        middle = sorted(w["dead_rows"] for w in windows[third : 2 * third])
        last = sorted(w["dead_rows"] for w in windows[2 * third :])
        checks.append(
            (
                "dead tuples, most before the last third / in it",
                max(before),
                last[-1],
                last[-1] <= 1.25 * max(before) + 10_000,
            )
        )
        checks.append(
            (
                "dead tuples, median of the middle third / last third",
                middle[len(middle) // 2],
                last[len(last) // 2],
                last[len(last) // 2] <= 1.25 * middle[len(middle) // 2] + 10_000,
            )
        )
    lines = [
        f"| measure | first {span:g} min | last {span:g} min | ok |",
        "|---|---|---|---|",
        *(
            f"| {name} | {a:,.1f} | {b:,.1f} | {'yes' if ok else 'NO'} |"
            for name, a, b, ok in checks
        ),
    ]
    return lines, all(ok for *_, ok in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=1000, help="jobs enqueued per second")
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--retention", default="2m", help="how long succeeded jobs are kept")
    args = parser.parse_args()
    if args.minutes < MIN_MINUTES:
        parser.error(f"--minutes must be at least {MIN_MINUTES:g} (three windows of 10 s)")
    windows = soak(args)
    lines, ok = verdict(windows, args.minutes)
    print(f"\n### soak, {args.backend}, {args.minutes:g} min at {args.rate:,} jobs/s\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
