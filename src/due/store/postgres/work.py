"""Long work on PostgreSQL (a mixin of PostgresStore): checkpoints, pieces, the
job's own transaction, pauses and the queues' overview."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from due.core.records import NewJob, QueueOverview, queue_overviews
from due.errors import JobNotFoundError, LeaseLost
from due.store import pieces
from due.store.postgres.base import (
    QUERIES,
    PostgresBase,
    atranslate_errors,
    normalise,
    piece_queries,
    require_async_connection,
    require_sync_connection,
    retried_on_conflict,
    translate_errors,
)


class PostgresWork(PostgresBase):
    def save_checkpoint(
        self, job_id: int, token: int, value: str, connection: Any = None
    ) -> bool | None:
        """Fenced; None when the lease is lost, else whether a cancel was requested."""
        params = {"id": job_id, "token": token, "value": value}
        if connection is None:
            rows = self._all("save_checkpoint", params)
        else:
            require_sync_connection(connection, "ctx.checkpoint(..., connection=conn)")
            with translate_errors(self.url), connection.cursor(row_factory=dict_row) as cur:
                cur.execute(QUERIES["save_checkpoint"], params)
                rows = cur.fetchall()
        return bool(rows[0]["cancel_requested"]) if rows else None

    async def save_checkpoint_async(
        self, job_id: int, token: int, value: str, connection: Any
    ) -> bool | None:
        require_async_connection(connection, "await ctx.checkpoint(..., connection=conn)")
        params = {"id": job_id, "token": token, "value": value}
        async with (
            atranslate_errors(self.url),
            connection.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute(QUERIES["save_checkpoint"], params)
            rows = await cur.fetchall()
        return bool(rows[0]["cancel_requested"]) if rows else None

    @retried_on_conflict
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
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["unbounded_transaction"])
            cur.execute(QUERIES["add_pieces"], params)
            row = cur.fetchone()
            if row is None:
                return None  # the parent's lease is lost: add nothing
            added = _insert_pieces(cur, parent, jobs, row["held"], self._fetch_now(cur))
            cur.execute(QUERIES["count_new_pieces"], {"parent": parent, "added": added})
            return added

    @retried_on_conflict
    def batch(
        self, name: str, jobs: Sequence[NewJob], on_complete: str | None, on_piece_failure: str
    ) -> int:
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["unbounded_transaction"])
            now = self._fetch_now(cur)
            queue = jobs[0].queue if jobs else "default"
            cur.execute(
                QUERIES["insert_batch_parent"],
                {
                    "task": name,
                    "queue": queue,
                    "total": len(jobs),
                    "on_complete": on_complete,
                    "on_piece_failure": on_piece_failure,
                    "now": now,
                },
            )
            parent = cur.fetchone()
            assert parent is not None
            _insert_pieces(cur, parent["id"], jobs, False, now)
            if not jobs:
                pieces.settle(piece_queries(cur), [{"id": parent["id"], "state": "waiting"}], now)
            return int(parent["id"])

    @contextlib.contextmanager
    def job_transaction(self, job_id: int, token: int, progress: str | None) -> Iterator[Any]:
        with (
            translate_errors(self.url),
            self.handler_pool().connection() as conn,
            conn.transaction(),
        ):
            yield conn
            with conn.cursor(row_factory=dict_row) as cur:
                now = self._fetch_now(cur)
                cur.execute(QUERIES["lock_parents"], {"ids": [job_id]})  # parents first
                params = {"id": job_id, "token": token, "progress": progress, "now": now}
                cur.execute(QUERIES["complete_in_transaction"], params)
                row = cur.fetchone()
                if row is None:  # rolls everything back, the handler's writes too
                    raise LeaseLost(f"job {job_id} lost its lease: its transaction is undone")
                pieces.settle(piece_queries(cur), [{**row, "state": "succeeded"}], now)

    def pause_queue(self, queue: str, paused: bool) -> None:
        self._all("set_queue_paused", {"name": queue, "paused": paused, "now": self._now()})

    @retried_on_conflict
    def hold_group(self, parent: int, held: bool) -> None:
        if not self._all("hold_group", {"parent": parent, "held": held}):
            raise JobNotFoundError(f"no job with id {parent}")

    def queue_overview(self) -> list[QueueOverview]:
        paused = {row["name"]: bool(row["paused"]) for row in self._all("queue_states", {})}
        rows = [normalise(row) for row in self._all("queue_overview", {"now": self._now()})]
        known = [row["name"] for row in self._all("known_queue_names", {})]
        return queue_overviews(rows, paused, known)

    def queue_in_use(self, queue: str) -> bool:
        return bool(self._all("queue_in_use", {"queue": queue})[0]["found"])


def _insert_pieces(
    cur: psycopg.Cursor[dict[str, Any]], parent: int, jobs: Sequence[NewJob], held: bool, now: Any
) -> int:
    if not jobs:
        return 0
    cur.execute(
        QUERIES["insert_pieces"],
        {
            "parent": parent,
            "held": held,
            "now": now,
            "tasks": [job.task for job in jobs],
            "queues": [job.queue for job in jobs],
            "priorities": [job.priority for job in jobs],
            "payloads": [job.payload for job in jobs],
            "max_attempts": [job.max_attempts for job in jobs],
            "stuck_afters": [job.stuck_after for job in jobs],
            "keys": pieces.piece_keys(jobs),
        },
    )
    return len(cur.fetchall())
