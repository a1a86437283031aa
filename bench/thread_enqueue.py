"""One-job enqueues from many threads at once (a threaded web server's requests).

Run with .venv/bin/python bench/thread_enqueue.py [--backend both] [--threads 1,8,32]
         [--jobs 3200] [--runs 3]

Each run: a fresh database, then `threads` threads each call `task.enqueue(i)`
`jobs / threads` times, started together; jobs/s from the start to the last
return (each return is a commit), and every job checked stored once. Those
made while another thread's enqueue is written wait for it and are written
together (store/thread_groups.py). Runs of each thread count interleave. A
table of medians [min-max].
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import due


def one_run(backend: str, threads: int, jobs: int) -> float:
    app = due.App(common.fresh_due_url(backend, "thread_enqueue"))
    try:
        app.migrate()

        @app.task(name="job")
        def job(i: int) -> None:
            pass

        job.enqueue(-1)  # the schema checked, a connection open
        per_thread = jobs // threads
        start = threading.Barrier(threads + 1)
        ids: list[int] = []

        def enqueue() -> None:
            start.wait()
            mine = [job.enqueue(i).id for i in range(per_thread)]
            ids.extend(mine)

        workers = [threading.Thread(target=enqueue) for _ in range(threads)]
        for worker in workers:
            worker.start()
        start.wait()
        began = time.perf_counter()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - began
        stored = {stored_job.id for stored_job in app.jobs(limit=jobs + 10)}
        if len(set(ids)) != threads * per_thread or not set(ids) <= stored:
            raise SystemExit(f"{backend}, {threads} threads: a job missing or given twice")
        return threads * per_thread / seconds
    finally:
        app.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--threads", default="1,8,32", help="thread counts, comma-separated")
    parser.add_argument("--jobs", type=int, default=3200, help="jobs a run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    counts = [int(n) for n in args.threads.split(",")]
    print("| backend | threads | jobs/s, median [min-max] |")
    print("|---|---|---|")
    for backend in backends:
        rates: dict[int, list[float]] = {n: [] for n in counts}
        for _ in range(args.runs):
            for n in counts:
                rates[n].append(one_run(backend, n, args.jobs))
        for n in counts:
            low, median, high = min(rates[n]), statistics.median(rates[n]), max(rates[n])
            print(f"| {backend} | {n} | {median:,.0f} [{low:,.0f}-{high:,.0f}] |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
