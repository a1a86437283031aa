"""pgqueuer (PostgreSQL, asyncpg + uvloop as in its README) adapter for the due benchmark.

Run with bench/.venv-peers/bin/python bench/peers/pgqueuer.py <test> ...
  enqueue single: `await Queries.enqueue(name, payload)` per job; bulk: `Queries.enqueue`
  with lists, 1000 jobs per call; side by side: the single call from 50 coroutines,
  on an `AsyncpgPoolDriver` (asyncpg's default pool, 10 connections).
  Worker: `PgQueuer(AsyncpgDriver(conn)).run(...)` (what
  `pgq run` runs).  Default here = the best no-op setting in
  shared/peer-bench/postgres/RESULTS.md: batch_size=100, max_concurrent_tasks unlimited
  (library defaults: 10, unlimited).  --batch B: batch_size=B, max_concurrent_tasks
  unlimited (a no-op drain is fastest at about 1,000: bench/README.md, "Each library
  at its best").  --concurrency C caps in-flight jobs: max_concurrent_tasks=C with
  batch_size=C//2 (pgqueuer requires max >= 2 x batch).
  Scheduled jobs: `execute_after=timedelta`.  Finished jobs are deleted from `pgqueuer`.
  Rescue: the dequeue re-picks 'picked' jobs whose heartbeat is older than 30 s.
"""

from __future__ import annotations

import os
import sys

# This file is named like the library: put bench/ (for common) in place of peers/.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import asyncio  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from datetime import timedelta  # noqa: E402
from importlib.metadata import version  # noqa: E402
from typing import Any  # noqa: E402

import asyncpg  # noqa: E402
import uvloop  # noqa: E402
from pgqueuer import PgQueuer  # noqa: E402
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver  # noqa: E402
from pgqueuer.models import Job  # noqa: E402
from pgqueuer.queries import Queries  # noqa: E402

import common  # noqa: E402

ENTRYPOINT = "bench_job"
DEFAULT_BATCH = 100


def run_options(concurrency: int | None, batch: int | None = None) -> dict[str, int | None]:
    if concurrency is None:
        return {"batch_size": batch or DEFAULT_BATCH, "max_concurrent_tasks": None}
    if batch is not None:
        raise SystemExit("pgqueuer: give --batch (unlimited in-flight jobs) or --concurrency")
    return {"batch_size": max(1, concurrency // 2), "max_concurrent_tasks": concurrency}


class PgQueuerAdapter(common.Adapter):
    """pgqueuer on PostgreSQL."""

    lib = "pgqueuer"
    has_async_enqueue = True
    rescue_note = (
        "automatic: dequeue re-picks jobs whose heartbeat is older than heartbeat_timeout "
        "(default 30 s, heartbeat every 15 s)"
    )

    @classmethod
    def add_arguments(cls, parser: common.argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--batch",
            type=int,
            default=None,
            help=f"batch_size with unlimited in-flight jobs (default {DEFAULT_BATCH})",
        )

    def version(self) -> str:
        return version("pgqueuer")

    def variant(self) -> str:
        return "" if self.args.batch is None else f"_b{self.args.batch}"

    def worker_args(self) -> list[str]:
        return [] if self.args.batch is None else ["--batch", str(self.args.batch)]

    def setting(self, concurrency: int | None) -> str:
        opts = run_options(concurrency, self.args.batch)
        cap = opts["max_concurrent_tasks"] or "unlimited"
        return f"batch_size={opts['batch_size']} max_concurrent_tasks={cap}"

    # -- driver side
    def create_db(self) -> None:
        common.recreate_pg_db(self.db)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self._install())

    async def _install(self) -> None:
        conn = await asyncpg.connect(common.pg_url(self.db))
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    def open(self) -> None:
        self.runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        self.conn = self.runner.run(asyncpg.connect(common.pg_url(self.db)))
        self.queries = Queries(AsyncpgDriver(self.conn))
        # Its one-connection driver takes one query at a time (a lock): side by side,
        # each enqueue takes a connection of a pool (asyncpg's default size), opened here.
        self.pool: asyncpg.Pool | None = None
        if getattr(self.args, "mode", None) == "side_by_side":
            self.pool = self.runner.run(self._open_pool())

    async def _open_pool(self) -> asyncpg.Pool:
        return await asyncpg.create_pool(common.pg_url(self.db))

    def close(self) -> None:
        if self.pool is not None:
            self.runner.run(self.pool.close())
        self.runner.run(self.conn.close())
        self.runner.close()

    def enqueue_many(self, jobs: Sequence[common.Job], mode: str) -> None:
        self.runner.run(self._enqueue_many(jobs, mode))

    async def _enqueue_many(self, jobs: Sequence[common.Job], mode: str) -> None:
        if mode == "side_by_side":
            assert self.pool is not None  # opened for this mode
            queries = Queries(AsyncpgPoolDriver(self.pool))
            await common.side_by_side(
                jobs, lambda job: queries.enqueue(ENTRYPOINT, job.as_json().encode())
            )
            return
        if mode == "single":
            for job in jobs:
                await self.queries.enqueue(ENTRYPOINT, job.as_json().encode())
            return
        for i in range(0, len(jobs), common.CHUNK):
            chunk = jobs[i : i + common.CHUNK]
            payloads: list[bytes | None] = [j.as_json().encode() for j in chunk]
            await self.queries.enqueue([ENTRYPOINT] * len(chunk), payloads, [0] * len(chunk))

    def enqueue_one(self, job: common.Job, run_at: float | None = None) -> None:
        after = None if run_at is None else timedelta(seconds=max(0.0, run_at - time.time()))
        payload = job.as_json().encode()
        self.runner.run(self.queries.enqueue(ENTRYPOINT, payload, execute_after=after))

    def count_rows(self) -> int:
        return int(common.pg_scalar(self.db, "SELECT count(*) FROM pgqueuer"))

    def count_acknowledged(self, enqueued: int) -> int | None:
        # pgqueuer deletes a job's row when it completes, and logs it in the same
        # statement (its log_job query: DELETE ... RETURNING into pgqueuer_log,
        # sent for a buffer of ended jobs): a row gone from its queue table is a
        # job acknowledged and present in its log.
        return enqueued - int(common.pg_scalar(self.db, "SELECT count(*) FROM pgqueuer"))

    def queue_state(self) -> dict[str, Any]:
        sql = (
            "SELECT coalesce(json_object_agg(status, n), '{}') FROM "
            "(SELECT status::text, count(*) AS n FROM pgqueuer GROUP BY 1) AS s"
        )
        return {"pgqueuer": dict(common.pg_scalar(self.db, sql))}

    # -- worker side
    def run_worker(self, concurrency: int | None) -> None:
        uvloop.run(self._worker(concurrency))

    async def _worker(self, concurrency: int | None) -> None:
        conn = await asyncpg.connect(common.pg_url(self.db))
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(ENTRYPOINT)
        async def bench_job(job: Job) -> None:
            data = common.Job.from_json(job.payload or b"")
            await common.run_job_async(data.ref, data.t_ref, data.sleep_s)

        opts = run_options(concurrency, self.args.batch)
        await pgq.run(
            batch_size=opts["batch_size"] or 1, max_concurrent_tasks=opts["max_concurrent_tasks"]
        )


if __name__ == "__main__":
    common.main(PgQueuerAdapter)
