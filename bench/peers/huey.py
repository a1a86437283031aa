"""huey SqliteHuey (SQLite) adapter for the due benchmark.

Run with bench/.venv-peers/bin/python bench/peers/huey.py <test> ...
  SqliteHuey with its defaults (WAL, SQLite's default synchronous=FULL, results on).
  enqueue single: calling the task (one transaction per job); huey has no batch enqueue,
  so `enqueue --mode bulk` is refused.  Worker: the consumer built exactly as
  `huey_consumer app.huey -k thread -w C` builds it (ConsumerConfig, its INFO logger,
  create_consumer().run()); default 1 thread, the best no-op setting in
  shared/peer-bench/sqlite/RESULTS.md.  Scheduled jobs: `task.schedule(delay=...)`.
  Rescue: SqliteHuey deletes a task row when it dequeues it (at most once), so a job whose
  consumer is killed is lost; that is what `rescue` is expected to show.
"""

from __future__ import annotations

import os
import sys

# This file is named like the library: put bench/ (for common) in place of peers/.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import logging  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from huey import SqliteHuey  # noqa: E402
from huey.consumer_options import ConsumerConfig  # noqa: E402

import common  # noqa: E402


def make_huey(path: str) -> tuple[SqliteHuey, Any]:
    huey = SqliteHuey("bench", filename=path)

    @huey.task(name="bench_job")
    def bench_job(ref: str, t_ref: float, sleep_s: float) -> None:
        common.run_job_sync(ref, t_ref, sleep_s)

    return huey, bench_job


class Huey(common.Adapter):
    """huey's SqliteHuey."""

    lib = "huey"
    backends = ("sqlite",)
    has_bulk = False
    default_concurrency = 1
    rescue_note = "at most once: SqliteHuey deletes the task row on dequeue, so it is lost"

    def version(self) -> str:
        return version("huey")

    def setting(self, concurrency: int | None) -> str:
        return f"thread workers={concurrency or 1}"

    # -- driver side
    def create_db(self) -> None:
        common.fresh_sqlite_path(Path(self.db))
        huey, _ = make_huey(self.db)
        huey.storage.close()

    def open(self) -> None:
        self.huey, self.task = make_huey(self.db)

    def close(self) -> None:
        self.huey.storage.close()

    def enqueue_many(self, jobs: Sequence[common.Job], mode: str) -> None:
        if mode != "single":
            raise common.NotSupportedError("huey has no batch enqueue API")
        for job in jobs:
            self.task(job.ref, job.t_ref, job.sleep_s)

    def enqueue_one(self, job: common.Job, run_at: float | None = None) -> None:
        args = (job.ref, job.t_ref, job.sleep_s)
        if run_at is None:
            self.task(*args)
        else:
            self.task.schedule(args=args, delay=max(0.0, run_at - time.time()))

    def count_rows(self) -> int:
        return int(common.sqlite_scalar(self.db, "SELECT count(*) FROM task"))

    def queue_state(self) -> dict[str, Any]:
        return {
            "task_rows": common.sqlite_scalar(self.db, "SELECT count(*) FROM task"),
            "schedule_rows": common.sqlite_scalar(self.db, "SELECT count(*) FROM schedule"),
        }

    # -- worker side
    def run_worker(self, concurrency: int | None) -> None:
        huey, _ = make_huey(self.db)
        config = ConsumerConfig(workers=concurrency or 1, worker_type="thread")
        config.validate()
        config.setup_logger(logging.getLogger("huey"))
        huey.create_consumer(**config.values).run()


if __name__ == "__main__":
    common.main(Huey)
