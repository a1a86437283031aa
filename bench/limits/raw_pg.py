"""The PostgreSQL "limit" line: a bare hand-written job loop on a minimal table (psycopg 3).

Run with bench/.venv-peers/bin/python bench/limits/raw_pg.py enqueue|drain --backend postgres
  table   jobs(id bigserial, queue, state, run_at, payload jsonb) + partial index on
          (queue, run_at) WHERE state = 'ready'
  enqueue single: one INSERT per job, autocommit; bulk: INSERT ... SELECT FROM unnest(),
          1000 jobs per statement.
  drain   one worker process: claim a batch with UPDATE ... WHERE id = ANY(ARRAY(SELECT ...
          FOR UPDATE SKIP LOCKED LIMIT B)) RETURNING, run the same instrumented job body as
          the peers, mark the batch done with one UPDATE; B = --concurrency (default 100).
No latency / rescue: this is what the database allows, not a queue.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import time
from collections.abc import Sequence
from importlib.metadata import version

import psycopg

import common

SCHEMA = """
CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL DEFAULT 'q',
    state text NOT NULL DEFAULT 'ready',
    run_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb NOT NULL
);
CREATE INDEX jobs_ready ON jobs (queue, run_at) WHERE state = 'ready';
"""
INSERT_ONE = "INSERT INTO jobs (payload) VALUES (%s::jsonb)"
INSERT_MANY = "INSERT INTO jobs (payload) SELECT p::jsonb FROM unnest(%s::text[]) AS p"
# id = ANY(ARRAY(...)), not id IN (...): with planner statistics, IN (subquery) becomes a hash
# semi join over a sequential scan of the whole table, i.e. O(table) per claim.
CLAIM = """
UPDATE jobs SET state = 'running' WHERE id = ANY(ARRAY(
    SELECT id FROM jobs WHERE queue = 'q' AND state = 'ready' AND run_at <= now()
    ORDER BY run_at LIMIT %s FOR UPDATE SKIP LOCKED))
RETURNING id, payload
"""
DONE = "UPDATE jobs SET state = 'done' WHERE id = ANY(%s)"


class RawPg(common.Adapter):
    """Bare psycopg batch-claim loop (the PostgreSQL limit)."""

    lib = "raw_pg"
    tests = frozenset({"enqueue", "drain"})
    default_concurrency = 100

    def version(self) -> str:
        return f"psycopg {version('psycopg')}"

    def setting(self, concurrency: int | None) -> str:
        return f"claim batch={concurrency or 1}, 1 process"

    def create_db(self) -> None:
        common.recreate_pg_db(self.db)
        with psycopg.connect(common.pg_url(self.db), autocommit=True) as conn:
            conn.execute(SCHEMA)

    def open(self) -> None:
        self.conn = psycopg.connect(common.pg_url(self.db), autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def enqueue_many(self, jobs: Sequence[common.Job], mode: str) -> None:
        if mode == "single":
            for job in jobs:
                self.conn.execute(INSERT_ONE, (job.as_json(),))
            return
        for i in range(0, len(jobs), common.CHUNK):
            chunk = jobs[i : i + common.CHUNK]
            self.conn.execute(INSERT_MANY, ([j.as_json() for j in chunk],))

    def count_rows(self) -> int:
        return int(common.pg_scalar(self.db, "SELECT count(*) FROM jobs"))

    def count_acknowledged(self, enqueued: int) -> int | None:
        return int(common.pg_scalar(self.db, "SELECT count(*) FROM jobs WHERE state = 'done'"))

    def run_worker(self, concurrency: int | None) -> None:
        batch = concurrency or 1
        with psycopg.connect(common.pg_url(self.db), autocommit=True) as conn:
            while True:
                rows = conn.execute(CLAIM, (batch,)).fetchall()
                if not rows:
                    time.sleep(0.01)
                    continue
                for _id, (ref, t_ref, sleep_s) in rows:
                    common.run_job_sync(ref, t_ref, sleep_s)
                conn.execute(DONE, ([r[0] for r in rows],))


if __name__ == "__main__":
    common.main(RawPg)
