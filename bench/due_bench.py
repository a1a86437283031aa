"""due's adapter for the benchmark (the contract in bench/README.md).

Run with .venv/bin/python bench/due_bench.py <test> --backend sqlite|postgres ...
  enqueue single: `task.enqueue(...)` per job (one transaction each); bulk:
  `app.enqueue_many` with 1,000 requests per call (one multi-row statement); side by
  side: `await task.aenqueue(...)` from 50 coroutines of one loop.
  Worker: the same code as `due worker` (`due.worker.main.run_worker`), one
  process, one queue; default concurrency 100 (the claim batch is the free
  slots, so this is also the batch size), default lease 10 s. The job body is
  an `async def` task, as for pgqueuer. SQLite runs with synchronous=FULL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due
from due.worker.main import configure_logging, run_worker
from due.worker.settings import WorkerSettings

TASK = "bench_job"
DEFAULT_CONCURRENCY = 100


def make_app(url: str) -> tuple[due.App, due.Task[Any, Any]]:
    app = due.App(url)

    @app.task(name=TASK)
    async def bench_job(ref: str, t_ref: float, sleep_s: float) -> None:
        await common.run_job_async(ref, t_ref, sleep_s)

    return app, bench_job


class DueAdapter(common.Adapter):
    """due, on SQLite or PostgreSQL."""

    lib = "due"
    has_async_enqueue = True
    backends = ("sqlite", "postgres")
    rescue_note = "automatic: the lease (10 s) expires and any worker's rescuer requeues it"

    def version(self) -> str:
        return due.__version__

    @classmethod
    def add_arguments(cls, parser: common.argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--processes",
            type=int,
            default=1,
            help="worker processes against the one database (each with --concurrency)",
        )

    def variant(self) -> str:
        return f"_p{self.args.processes}" if self.args.processes > 1 else ""

    def worker_args(self) -> list[str]:
        return ["--processes", str(self.args.processes)]

    def setting(self, concurrency: int | None) -> str:
        processes = f", processes={self.args.processes}" if self.args.processes > 1 else ""
        return f"concurrency={concurrency or DEFAULT_CONCURRENCY}{processes}"

    def url(self) -> str:
        if self.backend == "postgres":
            return common.pg_url(self.db)
        return f"sqlite:///{self.db}"

    # -- driver side
    def create_db(self) -> None:
        if self.backend == "postgres":
            common.recreate_pg_db(self.db)
        else:
            common.fresh_sqlite_path(common.Path(self.db))
        app, _ = make_app(self.url())
        app.migrate()
        app.close()

    def open(self) -> None:
        self.app, self.task = make_app(self.url())

    def close(self) -> None:
        self.app.close()

    def enqueue_many(self, jobs: Sequence[common.Job], mode: str) -> None:
        if mode == "side_by_side":
            task = self.task
            asyncio.run(
                common.side_by_side(jobs, lambda j: task.aenqueue(j.ref, j.t_ref, j.sleep_s))
            )
            return
        if mode == "single":
            for job in jobs:
                self.task.enqueue(job.ref, job.t_ref, job.sleep_s)
            return
        for start in range(0, len(jobs), common.CHUNK):
            chunk = jobs[start : start + common.CHUNK]
            self.app.enqueue_many([self.task.request(j.ref, j.t_ref, j.sleep_s) for j in chunk])

    def enqueue_one(self, job: common.Job, run_at: float | None = None) -> None:
        when = None if run_at is None else datetime.fromtimestamp(run_at, UTC)
        self.task.options(run_at=when).enqueue(job.ref, job.t_ref, job.sleep_s)

    def count_rows(self) -> int:
        return len(self.app.jobs(limit=1_000_000))

    def count_acknowledged(self, enqueued: int) -> int | None:
        final = "('succeeded', 'failed', 'cancelled')"
        return int(self.scalar(f"SELECT count(*) FROM due_jobs WHERE state IN {final}"))

    def queue_state(self) -> dict[str, Any]:
        states: dict[str, int] = {}
        for job in self.app.jobs(limit=100_000):
            states[job.state.value] = states.get(job.state.value, 0) + 1
        return {"due_jobs": states}

    # -- worker side
    def run_worker(self, concurrency: int | None) -> None:
        # Forked before any connection opens; the driver stops the whole group.
        for _ in range(self.args.processes - 1):
            if os.fork() == 0:
                break
        configure_logging("text", os.environ.get("DUE_BENCH_LOG_LEVEL", "warning"))
        logging.getLogger("due").setLevel(logging.WARNING)
        app, _ = make_app(self.url())
        settings = WorkerSettings.build({"default": concurrency or DEFAULT_CONCURRENCY})
        run_worker(app, settings)


if __name__ == "__main__":
    common.main(DueAdapter)
