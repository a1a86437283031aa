"""Many web server processes enqueueing single jobs at once, with and without a worker.

    .venv/bin/python bench/web_enqueue.py [--backend both] [--shapes 1x1,1x4,8x1,8x4]
        [--jobs 3200] [--runs 3] [--worker both]

The shape of a gunicorn or uvicorn deployment: `P x T` is P processes (an App
each, sharing nothing but the database), each with T threads calling
`task.enqueue(i)`, one job a call, all started together; jobs/s from the start
to the last return (each return is a commit). With `--worker with`, a real
worker process (concurrency 100, no scheduler) runs the jobs meanwhile, as in
production: on SQLite it takes the file's write lock for its claims and
acknowledgements, on PostgreSQL it LISTENs for every wake-up. Each run: a fresh
database for every case, the cases interleaved (each case once a run, the
worker cases and the idle ones alternating first), and every job checked
stored once. A table of medians [min-max] per case, and each case's median
over the `1x1` median of the same backend and worker (the ratio to quote: this
machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import due

WORKER = """
import asyncio, sys
import due
from due.worker.settings import WorkerSettings
from due.worker.worker import Worker

app = due.App(sys.argv[1])

@app.task(name="job")
def job(i: int) -> None:
    pass

asyncio.run(Worker(app, WorkerSettings.build({"default": 100}, lease="30s", grace="1s")).run())
"""


def make_app(url: str) -> tuple[due.App, due.Task[..., None]]:
    app = due.App(url)

    @app.task(name="job")
    def job(i: int) -> None:
        pass

    return app, job


def _process(url: str, threads: int, count: int, start: Barrier, results: Any) -> None:
    """One web server process: an App, `threads` threads of `count` enqueues each."""
    app, job = make_app(url)
    try:
        job.enqueue(-1)  # the schema checked, a connection open, before the start
        ready = threading.Barrier(threads + 1)
        ids: list[int] = []

        def serve() -> None:
            ready.wait()
            mine = [job.enqueue(i).id for i in range(count)]
            ids.extend(mine)

        pool = [threading.Thread(target=serve) for _ in range(threads)]
        for thread in pool:
            thread.start()
        start.wait()
        ready.wait()
        for thread in pool:
            thread.join()
        results.put(ids)
    finally:
        app.close()


class RunningWorker:
    """A real worker process on the database, warmed (it ran a job) before the run."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, url], env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        app, job = make_app(url)
        try:
            warm = job.enqueue(-2)
            deadline = time.monotonic() + 60
            while app.get(warm.id).state.value != "succeeded":
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise SystemExit("the worker did not run its first job within 60 s")
                time.sleep(0.02)
        finally:
            app.close()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def one_run(backend: str, processes: int, threads: int, jobs: int, worker: bool) -> float:
    url = common.fresh_due_url(backend, "web_enqueue")
    setup = due.App(url)
    try:
        setup.migrate()
    finally:
        setup.close()
    running = RunningWorker(url) if worker else None
    try:
        per_thread = jobs // (processes * threads)
        arguments = [(url, threads, per_thread)] * processes
        seconds, found = common.side_by_side_processes(_process, arguments)
    finally:
        if running is not None:
            running.stop()
    ids = [job_id for made in found for job_id in made]
    made = processes * threads * per_thread
    checker = due.App(url)
    try:
        stored = {job.id for job in checker.jobs(limit=jobs + 10 * processes + 10)}
    finally:
        checker.close()
    if len(ids) != made or len(set(ids)) != made or not set(ids) <= stored:
        raise SystemExit(f"{backend}, {processes}x{threads}: a job missing or given twice")
    return made / seconds


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for shape in text.split(","):
        processes, _, threads = shape.partition("x")
        if not (processes.isdigit() and threads.isdigit()):
            raise SystemExit(f"--shapes: {shape!r} is not PxT (processes x threads), e.g. 8x4")
        shapes.append((int(processes), int(threads)))
    if (1, 1) not in shapes:
        raise SystemExit("--shapes: give 1x1 among them: each case is divided by it")
    return shapes


def load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--shapes", default="1x1,1x4,8x1,8x4", help="processes x threads")
    parser.add_argument("--jobs", type=int, default=3200, help="jobs a case and run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--worker", choices=("with", "without", "both"), default="both")
    args = parser.parse_args()
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    shapes = parse_shapes(args.shapes)
    workers = {"with": (True,), "without": (False,), "both": (False, True)}[args.worker]
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"load before: {load()}")
    rates: dict[tuple[str, bool, int, int], list[float]] = {}
    for run in range(args.runs):
        for backend in backends:
            order = workers if run % 2 == 0 else workers[::-1]  # neither always first
            for worker in order:
                for processes, threads in shapes:
                    rate = one_run(backend, processes, threads, args.jobs, worker)
                    rates.setdefault((backend, worker, processes, threads), []).append(rate)
        print(f"run {run + 1} done, load {load()}", file=sys.stderr)
    print(f"load after: {load()}\n")
    print("| backend | worker | processes x threads | jobs/s, median [min-max] | ÷ 1x1 |")
    print("|---|---|---|---|---|")
    for (backend, worker, processes, threads), found in rates.items():
        base = statistics.median(rates[backend, worker, 1, 1])
        median = statistics.median(found)
        print(
            f"| {backend} | {'running' if worker else 'none'} | {processes}x{threads} | "
            f"{median:,.0f} [{min(found):,.0f}-{max(found):,.0f}] | {median / base:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
