"""procrastinate (PostgreSQL, psycopg 3) adapter for the due benchmark.

Run with bench/.venv-peers/bin/python bench/peers/procrastinate.py <test> ...
  enqueue single: `await task.defer_async(...)` per job; bulk: `task.batch_defer_async`,
  1000 jobs per call; side by side: `defer_async` from 50 coroutines (its connector's
  pool).  Worker: `App.run_worker(queues=["bench"], concurrency=C)` (what the
  `procrastinate worker` CLI runs); default concurrency here is 10, the best no-op setting
  in shared/peer-bench/postgres/RESULTS.md (library default: 1).
  Scheduled jobs: `task.configure(schedule_at=...)`.
  Rescue: procrastinate does not re-run a killed worker's job by itself; with
  --stalled-recipe the worker also runs the documented recipe (a periodic task, every
  minute, calling job_manager.get_stalled_jobs() + retry_job()).
"""

from __future__ import annotations

import os
import sys

# This file is named like the library: put bench/ (for common) in place of peers/.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import datetime as dt  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from importlib.metadata import version  # noqa: E402
from typing import Any  # noqa: E402

import procrastinate  # noqa: E402

import common  # noqa: E402

QUEUE = "bench"


def make_app(db: str) -> tuple[procrastinate.App, Any]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=common.pg_url(db)))

    @app.task(name="bench_job", queue=QUEUE)
    async def bench_job(ref: str, t_ref: float, sleep_s: float) -> None:
        await common.run_job_async(ref, t_ref, sleep_s)

    return app, bench_job


def add_stalled_recipe(app: procrastinate.App) -> None:
    """The docs' recipe: retry jobs of stalled workers, from a periodic task."""

    @app.periodic(cron="* * * * *")
    @app.task(queue=QUEUE, queueing_lock="retry_stalled_jobs", pass_context=True)
    async def retry_stalled_jobs(context: Any, timestamp: int) -> None:
        for job in await app.job_manager.get_stalled_jobs():
            await app.job_manager.retry_job(job)


def kwargs_of(job: common.Job) -> dict[str, Any]:
    return {"ref": job.ref, "t_ref": job.t_ref, "sleep_s": job.sleep_s}


class Procrastinate(common.Adapter):
    """procrastinate on PostgreSQL."""

    lib = "procrastinate"
    has_async_enqueue = True
    default_concurrency = 10
    rescue_note = (
        "no automatic re-run: a killed worker's job stays 'doing'; heartbeat 10 s, stalled "
        "after 30 s, re-run only via the documented get_stalled_jobs()+retry_job() recipe"
    )

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--stalled-recipe",
            action="store_true",
            help="worker also runs the docs' periodic retry-stalled-jobs task (every minute)",
        )

    def version(self) -> str:
        return version("procrastinate")

    def variant(self) -> str:
        return "_recipe" if self.args.stalled_recipe else ""

    def setting(self, concurrency: int | None) -> str:
        recipe = " + stalled-jobs recipe" if self.args.stalled_recipe else ""
        return f"concurrency={concurrency or 1}{recipe}"

    def worker_args(self) -> list[str]:
        return ["--stalled-recipe"] if self.args.stalled_recipe else []

    # -- driver side
    def create_db(self) -> None:
        common.recreate_pg_db(self.db)
        app, _ = make_app(self.db)

        async def install() -> None:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(install())

    def open(self) -> None:
        self.runner = asyncio.Runner()
        self.app, self.task = make_app(self.db)
        self.runner.run(self._open())

    async def _open(self) -> None:
        await self.app.open_async()

    def close(self) -> None:
        self.runner.run(self._close())
        self.runner.close()

    async def _close(self) -> None:
        await self.app.close_async()

    def enqueue_many(self, jobs: Sequence[common.Job], mode: str) -> None:
        self.runner.run(self._enqueue_many(jobs, mode))

    async def _enqueue_many(self, jobs: Sequence[common.Job], mode: str) -> None:
        if mode == "side_by_side":
            await common.side_by_side(jobs, lambda job: self.task.defer_async(**kwargs_of(job)))
            return
        if mode == "single":
            for job in jobs:
                await self.task.defer_async(**kwargs_of(job))
            return
        for i in range(0, len(jobs), common.CHUNK):
            chunk = jobs[i : i + common.CHUNK]
            await self.task.batch_defer_async(*[kwargs_of(j) for j in chunk])

    def enqueue_one(self, job: common.Job, run_at: float | None = None) -> None:
        task = self.task
        if run_at is not None:
            when = dt.datetime.fromtimestamp(run_at, tz=dt.UTC)
            task = task.configure(schedule_at=when)
        self.runner.run(task.defer_async(**kwargs_of(job)))

    def count_rows(self) -> int:
        return int(common.pg_scalar(self.db, "SELECT count(*) FROM procrastinate_jobs"))

    def count_acknowledged(self, enqueued: int) -> int | None:
        sql = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('succeeded', 'failed')"
        return int(common.pg_scalar(self.db, sql))

    def queue_state(self) -> dict[str, Any]:
        sql = (
            "SELECT coalesce(json_object_agg(status, n), '{}') FROM "
            "(SELECT status::text, count(*) AS n FROM procrastinate_jobs GROUP BY 1) AS s"
        )
        return dict(common.pg_scalar(self.db, sql))

    # -- worker side
    def run_worker(self, concurrency: int | None) -> None:
        app, _ = make_app(self.db)
        if self.args.stalled_recipe:
            add_stalled_recipe(app)
        app.run_worker(queues=[QUEUE], concurrency=concurrency or 1)


if __name__ == "__main__":
    common.main(Procrastinate)
