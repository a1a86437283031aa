"""One-job enqueues from many threads, or many processes, at once (the requests of a
threaded web server, or of several server processes).

Run with .venv/bin/python bench/thread_enqueue.py [--backend both] [--threads 1,8,32]
         [--processes 4,8] [--jobs 3200] [--runs 3]

Each run: a fresh database, then `threads` threads of one process (or `processes`
processes, an App each, one thread each) each call `task.enqueue(i)` `jobs / n`
times, started together; jobs/s from the start to the last return (each return is
a commit), and every job checked stored once. In one process, those made while
another thread's enqueue is written wait for it and are written together
(store/thread_groups.py); processes share nothing but the database, where on
PostgreSQL each enqueue's wake-up holds the server's one lock on notifications
through its commit's flush (bench/notify_cost.py). Runs of each count
interleave. A table of medians [min-max].
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import due


def make_app(url: str) -> tuple[due.App, due.Task[..., None]]:
    app = due.App(url)

    @app.task(name="job")
    def job(i: int) -> None:
        pass

    job.enqueue(-1)  # the schema checked, a connection open
    return app, job


def threads_run(url: str, threads: int, jobs: int) -> tuple[float, list[int]]:
    app, job = make_app(url)
    try:
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
        return time.perf_counter() - began, ids
    finally:
        app.close()


def _process(url: str, count: int, start: Barrier, results: Any) -> None:
    app, job = make_app(url)
    try:
        start.wait()
        results.put([job.enqueue(i).id for i in range(count)])
    finally:
        app.close()


def processes_run(url: str, processes: int, jobs: int) -> tuple[float, list[int]]:
    arguments = [(url, jobs // processes)] * processes
    seconds, found = common.side_by_side_processes(_process, arguments)
    return seconds, [job_id for ids in found for job_id in ids]


def one_run(backend: str, kind: str, n: int, jobs: int) -> float:
    url = common.fresh_due_url(backend, "thread_enqueue")
    setup = due.App(url)
    try:
        setup.migrate()
    finally:
        setup.close()
    run: Callable[[str, int, int], tuple[float, list[int]]] = (
        threads_run if kind == "threads" else processes_run
    )
    seconds, ids = run(url, n, jobs)
    made = n * (jobs // n)
    checker = due.App(url)
    try:
        stored = {stored_job.id for stored_job in checker.jobs(limit=jobs + 10)}
    finally:
        checker.close()
    if len(set(ids)) != made or not set(ids) <= stored:
        raise SystemExit(f"{backend}, {n} {kind}: a job missing or given twice")
    return made / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--threads", default="1,8,32", help="thread counts, comma-separated")
    parser.add_argument("--processes", default="4,8", help="process counts ('' for none)")
    parser.add_argument("--jobs", type=int, default=3200, help="jobs a run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    settings = [("threads", int(n)) for n in args.threads.split(",") if n] + [
        ("processes", int(n)) for n in args.processes.split(",") if n
    ]
    print("| backend | threads | processes | jobs/s, median [min-max] |")
    print("|---|---|---|---|")
    for backend in backends:
        rates: dict[tuple[str, int], list[float]] = {setting: [] for setting in settings}
        for _ in range(args.runs):
            for kind, n in settings:
                rates[kind, n].append(one_run(backend, kind, n, args.jobs))
        for (kind, n), found in rates.items():
            low, median, high = min(found), statistics.median(found), max(found)
            threads, processes = (n, 1) if kind == "threads" else (1, n)
            print(
                f"| {backend} | {threads} | {processes} | {median:,.0f} [{low:,.0f}-{high:,.0f}] |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
