"""The SQLite "limit" line: a bare hand-written job loop on a minimal table (stdlib sqlite3).

Run with bench/.venv-peers/bin/python bench/limits/raw_sqlite.py enqueue|drain --backend sqlite
  WAL, synchronous=FULL (commits are durable, like SqliteHuey's default), busy_timeout 5 s.
  table   jobs(id integer primary key, queue, state, run_at, payload) + partial index on
          (queue, run_at) WHERE state = 'ready'
  enqueue single: one INSERT per job, autocommit; bulk: BEGIN IMMEDIATE + executemany of
          1000 jobs + COMMIT.
  drain   one worker process: BEGIN IMMEDIATE; UPDATE ... WHERE id IN (SELECT ... LIMIT B)
          RETURNING; COMMIT, run the same instrumented job body as the peers, then mark the
          batch done in one BEGIN IMMEDIATE ... COMMIT; B = --concurrency (default 100).
No latency / rescue: this is what the database allows, not a queue.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common

SCHEMA = (
    "CREATE TABLE jobs (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, state TEXT NOT NULL, "
    "run_at REAL NOT NULL, payload TEXT NOT NULL)",
    "CREATE INDEX jobs_ready ON jobs (queue, run_at) WHERE state = 'ready'",
)
INSERT = "INSERT INTO jobs (queue, state, run_at, payload) VALUES ('q', 'ready', ?, ?)"
CLAIM = (
    "UPDATE jobs SET state = 'running' WHERE id IN ("
    "SELECT id FROM jobs WHERE queue = 'q' AND state = 'ready' AND run_at <= ? "
    "ORDER BY run_at LIMIT ?) RETURNING id, payload"
)


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def in_transaction(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = conn.execute(sql, params).fetchall()
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return rows


class RawSqlite(common.Adapter):
    """Bare sqlite3 batch-claim loop (the SQLite limit)."""

    lib = "raw_sqlite"
    backends = ("sqlite",)
    tests = frozenset({"enqueue", "drain"})
    default_concurrency = 100

    def version(self) -> str:
        return f"sqlite {sqlite3.sqlite_version}"

    def setting(self, concurrency: int | None) -> str:
        return f"claim batch={concurrency or 1}, 1 process, synchronous=FULL"

    def create_db(self) -> None:
        conn = connect(str(common.fresh_sqlite_path(Path(self.db))))
        for sql in SCHEMA:
            conn.execute(sql)
        conn.close()

    def open(self) -> None:
        self.conn = connect(self.db)

    def close(self) -> None:
        self.conn.close()

    def enqueue_many(self, jobs: Sequence[common.Job], mode: str) -> None:
        now = time.time()
        if mode == "single":
            for job in jobs:
                self.conn.execute(INSERT, (now, job.as_json()))
            return
        for i in range(0, len(jobs), common.CHUNK):
            chunk = jobs[i : i + common.CHUNK]
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany(INSERT, [(now, j.as_json()) for j in chunk])
            self.conn.execute("COMMIT")

    def count_rows(self) -> int:
        return int(common.sqlite_scalar(self.db, "SELECT count(*) FROM jobs"))

    def count_acknowledged(self, enqueued: int) -> int | None:
        sql = "SELECT count(*) FROM jobs WHERE state = 'done'"
        return int(common.sqlite_scalar(self.db, sql))

    def run_worker(self, concurrency: int | None) -> None:
        batch = concurrency or 1
        conn = connect(self.db)
        while True:
            rows = in_transaction(conn, CLAIM, (time.time(), batch))
            if not rows:
                time.sleep(0.01)
                continue
            for _id, payload in rows:
                job = common.Job.from_json(payload)
                common.run_job_sync(job.ref, job.t_ref, job.sleep_s)
            marks = ",".join("?" * len(rows))
            sql = f"UPDATE jobs SET state = 'done' WHERE id IN ({marks})"
            in_transaction(conn, sql, [r[0] for r in rows])


if __name__ == "__main__":
    common.main(RawSqlite)
