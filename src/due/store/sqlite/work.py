"""Long work on SQLite (a mixin of SQLiteStore): checkpoints, pieces, the job's own
transaction, pauses and the queues' overview."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from due.core.records import NewJob, QueueOverview, queue_overviews
from due.errors import ConfigurationError, JobNotFoundError, LeaseLost
from due.store import pieces
from due.store.sqlite.base import (
    QUERIES,
    SQLiteBase,
    piece_queries,
    python_row,
    translate_errors,
)


class SQLiteWork(SQLiteBase):
    def save_checkpoint(
        self, job_id: int, token: int, value: str, connection: Any = None
    ) -> bool | None:
        """Fenced; None when the lease is lost, else whether a cancel was requested."""
        params = {"id": job_id, "token": token, "value": value}
        if connection is not None:
            if not isinstance(connection, sqlite3.Connection):
                raise ConfigurationError(
                    "ctx.checkpoint(..., connection=conn) takes a sqlite3.Connection for a "
                    f"SQLite app, got {type(connection).__name__}"
                )
            with translate_errors(self.path):
                found = connection.execute(QUERIES["save_checkpoint"], params).fetchone()
            return bool(found[0]) if found else None
        with self._write() as conn:
            row = conn.execute(QUERIES["save_checkpoint"], params).fetchone()
        return bool(row["cancel_requested"]) if row else None

    async def save_checkpoint_async(
        self, job_id: int, token: int, value: str, connection: Any
    ) -> bool | None:
        raise ConfigurationError(
            "a SQLite app has no async connections; call ctx.checkpoint(..., connection=conn) "
            "with a sqlite3.Connection"
        )

    def spawn(
        self,
        parent: int,
        token: int,
        jobs: Sequence[NewJob],
        on_complete: str | None,
        on_piece_failure: str | None,
    ) -> int | None:
        params = {
            "parent": parent,
            "token": token,
            "on_complete": on_complete,
            "on_piece_failure": on_piece_failure,
        }
        now = self._now()
        with self._write() as conn:
            row = conn.execute(QUERIES["add_pieces"], params).fetchone()
            if row is None:
                return None  # the parent's lease is lost: add nothing
            added = _insert_pieces(conn, parent, jobs, bool(row["held"]), now)
            conn.execute(QUERIES["count_new_pieces"], {"parent": parent, "added": added})
            return added

    def batch(
        self, name: str, jobs: Sequence[NewJob], on_complete: str | None, on_piece_failure: str
    ) -> int:
        now = self._now()
        with self._write() as conn:
            queue = jobs[0].queue if jobs else "default"
            parent = conn.execute(
                QUERIES["insert_batch_parent"],
                {
                    "task": name,
                    "queue": queue,
                    "total": len(jobs),
                    "on_complete": on_complete,
                    "on_piece_failure": on_piece_failure,
                    "now": now,
                },
            ).fetchone()["id"]
            _insert_pieces(conn, parent, jobs, False, now)
            if not jobs:
                pieces.settle(piece_queries(conn), [{"id": parent, "state": "waiting"}], now)
        return int(parent)

    @contextlib.contextmanager
    def job_transaction(self, job_id: int, token: int, progress: str | None) -> Iterator[Any]:
        with self._write() as conn:
            yield conn
            now = self._now()
            params = {"id": job_id, "token": token, "progress": progress, "now": now}
            with translate_errors(self.path):
                row = conn.execute(QUERIES["complete_in_transaction"], params).fetchone()
                if row is None:  # rolls everything back, the handler's writes too
                    raise LeaseLost(f"job {job_id} lost its lease: its transaction is undone")
                pieces.settle(piece_queries(conn), [{**dict(row), "state": "succeeded"}], now)

    def pause_queue(self, queue: str, paused: bool) -> None:
        with self._write() as conn:
            params = {"name": queue, "paused": paused, "now": self._now()}
            conn.execute(QUERIES["set_queue_paused"], params).fetchall()

    def hold_group(self, parent: int, held: bool) -> None:
        with self._write() as conn:
            rows = conn.execute(QUERIES["hold_group"], {"parent": parent, "held": held}).fetchall()
        if not rows:
            raise JobNotFoundError(f"no job with id {parent}")

    def queue_overview(self) -> list[QueueOverview]:
        paused = {row["name"]: bool(row["paused"]) for row in self._read("queue_states", {})}
        rows = [python_row(row) for row in self._read("queue_overview", {"now": self._now()})]
        known = [row["name"] for row in self._read("known_queue_names", {})]
        return queue_overviews(rows, paused, known)

    def queue_in_use(self, queue: str) -> bool:
        return bool(self._read("queue_in_use", {"queue": queue})[0]["found"])


def _insert_pieces(
    conn: sqlite3.Connection, parent: int, jobs: Sequence[NewJob], held: bool, now: float
) -> int:
    before = conn.total_changes
    conn.executemany(
        QUERIES["insert_pieces"],
        [
            {
                "task": job.task,
                "queue": job.queue,
                "priority": job.priority,
                "payload": job.payload,
                "max_attempts": job.max_attempts,
                "stuck_after": job.stuck_after,
                "parent": parent,
                "piece_key": key,
                "held": held,
                "now": now,
            }
            for job, key in zip(jobs, pieces.piece_keys(jobs), strict=True)
        ],
    )
    return conn.total_changes - before
