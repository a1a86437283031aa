"""Through a transaction-mode PgBouncer beside direct: drain and pickup.

    .venv/bin/python bench/pooler_bench.py [--jobs 20000] [--pickups 60] [--runs 3]

Three ways to reach the same PostgreSQL, measured interleaved in one run:

direct    the worker connects to PostgreSQL (prepared statements, LISTEN)
pooler    through PgBouncer 1.18, pool_mode = transaction, due_pooler=transaction:
          no prepared statements, wake-ups by polling every 0.25 s
listen    the same, with listen_url= pointing straight at PostgreSQL for wake-ups

drain     --jobs no-op jobs enqueued in bulk, then one `due worker -q default=100`;
          the time from its start to the last job final, as the database shows it
pickup    an idle worker; --pickups jobs enqueued one by one, 0.2 s apart; each
          job's started_at - created_at (both the database's clock), p50 / p99

One JSON line per result on stdout, also appended to bench/results/results.jsonl;
a table at the end (medians over --runs, with min-max).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psycopg
from tests.helpers.pgbouncer import PgBouncer

import common
import due

DATABASE = f"{common.DB_PREFIX}due_pooler"
APP = "bench_pooler_app:app"
APP_SOURCE = """
import due

app = due.App()


@app.task(name="noop")
async def noop() -> None:
    return None
"""


def make_app(url: str) -> due.App:
    """An app that knows the task by name (the worker imports APP_SOURCE)."""
    app = due.App(url)

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app


def worker(url: str, folder: Path, log: Path, listen_url: str | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DUE_DATABASE_URL": url, "PYTHONPATH": str(folder)}
    env.pop("DUE_LISTEN_URL", None)
    if listen_url is not None:
        env["DUE_LISTEN_URL"] = listen_url
    command = [sys.executable, "-m", "due", "--app", APP, "worker", "-q", "default=100"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            [*command, "--no-scheduler", "--log-level", "warning"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def final_count(direct: str) -> int:
    with psycopg.connect(direct, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM due_jobs WHERE state IN ('succeeded', 'failed', 'cancelled')"
        ).fetchone()
    return int(row[0]) if row else 0


def reset(direct: str) -> None:
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute("TRUNCATE due_jobs, due_job_stats")


def drain(url: str, direct: str, listen: str | None, jobs: int, folder: Path) -> float:
    reset(direct)
    app = make_app(direct)
    app.enqueue_many(due.JobRequest("noop") for _ in range(jobs))
    app.close()
    started = time.perf_counter()
    process = worker(url, folder, folder / "drain.log", listen)
    try:
        while final_count(direct) < jobs:
            if process.poll() is not None:
                raise RuntimeError((folder / "drain.log").read_text())
            time.sleep(0.05)
        return jobs / (time.perf_counter() - started)
    finally:
        stop(process)


def pickup(url: str, direct: str, listen: str | None, count: int, folder: Path) -> list[float]:
    reset(direct)
    process = worker(url, folder, folder / "pickup.log", listen)
    app = make_app(direct)
    try:
        time.sleep(3)  # the worker is up and idle
        ids = []
        for _ in range(count):
            ids.append(app.enqueue("noop").id)
            time.sleep(0.2)
        deadline = time.monotonic() + 60
        while final_count(direct) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        with psycopg.connect(direct, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM due_jobs "
                "WHERE id = ANY(%s) AND started_at IS NOT NULL",
                (ids,),
            ).fetchall()
        return [float(row[0]) for row in rows]
    finally:
        app.close()
        stop(process)


def record(way: str, test: str, value: float, unit: str, **values: Any) -> dict[str, Any]:
    result = {
        "lib": "due",
        "backend": "postgres",
        "test": f"pooler_{test}",
        "setting": way,
        "version": due.__version__,
        "ts": round(time.time(), 3),
        "value": round(value, 1),
        "unit": unit,
        "values": values,
    }
    print(json.dumps(result), flush=True)
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with (common.RESULTS_DIR / "results.jsonl").open("a") as out:
        out.write(json.dumps(result) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--pickups", type=int, default=60)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    common.exit_on_sigterm()
    common.recreate_pg_db(DATABASE)
    direct = common.pg_url(DATABASE)
    due.App(direct).migrate()
    drains: dict[str, list[float]] = {"direct": [], "pooler": [], "listen": []}
    pickups: dict[str, list[float]] = {"direct": [], "pooler": [], "listen": []}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "bench_pooler_app.py").write_text(APP_SOURCE)
        with PgBouncer.start(tmp_dir=folder / "pgbouncer", database=DATABASE) as bouncer:
            pooled = bouncer.url(due_pooler="transaction")
            ways = {"direct": (direct, None), "pooler": (pooled, None), "listen": (pooled, direct)}
            for _ in range(args.runs):  # interleaved: the machine's noise falls on all
                for way, (url, listen) in ways.items():
                    drains[way].append(drain(url, direct, listen, args.jobs, folder))
                    record(way, "drain", drains[way][-1], "jobs/s", jobs=args.jobs)
                    pickups[way].extend(pickup(url, direct, listen, args.pickups, folder))
    print("\n| way | drain (jobs/s, median, min-max) | pickup p50 | pickup p99 |")
    print("|---|---|---|---|")
    for way, rates in drains.items():
        summary = common.ms_summary(pickups[way])
        record(way, "pickup", summary["p50_ms"] or 0.0, "ms", **summary)
        print(
            f"| {way} | {statistics.median(rates):,.0f} "
            f"({min(rates):,.0f}-{max(rates):,.0f}) | "
            f"{summary['p50_ms'] or 0:.1f} ms | {summary['p99_ms'] or 0:.1f} ms |"
        )


if __name__ == "__main__":
    main()
