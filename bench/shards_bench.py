"""Queues sharded over two PostgreSQL databases, against one database.

    .venv/bin/python bench/shards_bench.py [--jobs 40000] [--runs 3]

Three set-ups drain the same number of no-op jobs (enqueued while their
queue is paused, then resumed; timed to the last acknowledgement as the
database recorded it), interleaved run by run:

one-db-1p   one database, one worker process
one-db-2p   one database, two worker processes
two-dbs     two databases on the same server (a shard each: half the jobs),
            one worker process attached to each

On this 2-core machine the server and the workers share the cores, so the
sharded figure says what the design costs or saves here, not what two
database hosts would give (bench/NOTES.md reads it that way). One JSON line
per run, and a table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime

import common
import timers_bench

SETUPS = {"one-db-1p": (1, 1), "one-db-2p": (1, 2), "two-dbs": (2, 1)}


def drain(databases: int, processes: int, jobs: int) -> float:
    urls = []
    for shard in range(databases):
        name = f"{common.DB_PREFIX}due_shard_{shard}"
        common.recreate_pg_db(name)
        urls.append(common.pg_url(name))
    apps = [timers_bench.make_app(url) for url in urls]
    workers = []
    try:
        ranges = []
        for app, task in apps:
            app.migrate()
            app.pause_queue("default")
            per_shard = jobs // databases
            ids = [
                job.id
                for start in range(0, per_shard, 1000)
                for job in app.enqueue_many(
                    [task.request(n) for n in range(start, min(per_shard, start + 1000))]
                )
            ]
            ranges.append((ids[0], ids[-1], len(ids)))
        log_dir = common.WORK_DIR / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        for shard, url in enumerate(urls):
            for process in range(processes):
                log = log_dir / f"shards-{databases}-{shard}-{process}.log"
                workers.append(timers_bench.start_worker(url, log))
        time.sleep(3)  # the workers are up and idle on their paused queues
        resumed = datetime.now(UTC).timestamp()
        for app, _ in apps:
            app.resume_queue("default")
        last_ack = 0.0
        deadline = time.monotonic() + 300
        for url, (first, last, count) in zip(urls, ranges, strict=True):
            while (ended := timers_bench.ended_between(url, first, last))[0] < count:
                if time.monotonic() > deadline:
                    raise TimeoutError("the drain did not end in 300 s")
                time.sleep(0.05)
            last_ack = max(last_ack, ended[1])
        return jobs / (last_ack - resumed)
    finally:
        for worker in workers:
            timers_bench.stop_worker(worker)
        for app, _ in apps:
            app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {name: [] for name in SETUPS}
    for run in range(args.runs):
        for name, (databases, processes) in SETUPS.items():
            rate = drain(databases, processes, args.jobs)
            results[name].append(rate)
            rec = {"bench": "shards", "setup": name, "run": run, "jobs_per_s": rate}
            common.save(rec)
    base = statistics.median(results["one-db-1p"])
    print(f"\n### {args.jobs:,} no-op jobs, medians of {args.runs} [min-max]\n")
    print("| set-up | jobs/s | ÷ one database, one process |\n|---|---|---|")
    for name, rates in results.items():
        median = statistics.median(rates)
        spread = f"[{min(rates):,.0f}-{max(rates):,.0f}]"
        print(f"| {name} | {median:,.0f} {spread} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
