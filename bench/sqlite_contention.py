"""How long a web process's enqueue waits while a worker drains flat out, on SQLite.

Run with .venv/bin/python bench/sqlite_contention.py [--seconds 8] [--runs 2]

A worker process drains 200,000 no-op jobs (concurrency 100); meanwhile this
process enqueues one job every 5 ms and times each enqueue, to its commit.
The two processes take turns on the file's one write lock: what this measures
is how fairly (p50, p99 and the worst wait, in ms). Work files go to bench/work/.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

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
async def job(i: int) -> None:
    pass

asyncio.run(Worker(app, WorkerSettings.build({"default": 100}, lease="10s", grace="1s")).run())
"""


def make_app(url: str) -> tuple[due.App, due.Task[..., None]]:
    app = due.App(url)

    @app.task(name="job")
    async def job(i: int) -> None:
        pass

    return app, job


def one_run(path: Path, seconds: float) -> list[float]:
    common.fresh_sqlite_path(path)
    url = f"sqlite:///{path}"
    app, job = make_app(url)
    app.migrate()
    for start in range(0, 200_000, 5_000):
        app.enqueue_many([job.request(i) for i in range(start, start + 5_000)])
    worker = subprocess.Popen([sys.executable, "-c", WORKER, url])
    try:
        time.sleep(1.0)  # the worker is draining
        waits: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            job.enqueue(-1)
            waits.append((time.perf_counter() - started) * 1000)
            time.sleep(0.005)
        return waits
    finally:
        worker.terminate()
        worker.wait(10)
        app.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    work = common.WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    print("| run | enqueues | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    for run in range(args.runs):
        waits = sorted(one_run(work / "contention.db", args.seconds))
        p99 = waits[min(len(waits) - 1, int(0.99 * len(waits)))]
        median = statistics.median(waits)
        print(f"| {run + 1} | {len(waits)} | {median:.1f} | {p99:.1f} | {waits[-1]:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
