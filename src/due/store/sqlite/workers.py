"""The registry of worker processes, on SQLite (a mixin of SQLiteStore)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from due.core.records import WorkerInfo
from due.store.sqlite.base import QUERIES, SQLiteBase, to_datetime


class SQLiteWorkers(SQLiteBase):
    def register_worker(
        self,
        worker: str,
        host: str,
        pid: int,
        queues: Mapping[str, int],
        tasks: Sequence[str] = (),
    ) -> None:
        params = {
            "id": worker,
            "host": host,
            "pid": pid,
            "queues": json.dumps(dict(queues)),
            "tasks": json.dumps(sorted(tasks)),
            "now": self._now(),
        }
        with self._write() as conn:
            conn.execute(QUERIES["register_worker"], params)

    def touch_worker(self, worker: str) -> None:
        with self._write() as conn:
            conn.execute(QUERIES["touch_worker"], {"id": worker, "now": self._now()})

    def set_worker_state(self, worker: str, state: str) -> None:
        with self._write() as conn:
            params = {"id": worker, "state": state, "now": self._now()}
            conn.execute(QUERIES["set_worker_state"], params)

    def mark_gone_workers(self, after_seconds: float) -> list[str]:
        with self._write() as conn:
            params = {"after": float(after_seconds), "now": self._now()}
            rows = conn.execute(QUERIES["mark_gone_workers"], params).fetchall()
        return [row["id"] for row in rows]

    def list_workers(self, limit: int = 100) -> list[WorkerInfo]:
        workers = []
        for row in self._read("list_workers", {"limit": limit}):
            row["queues"] = json.loads(row["queues"])
            row["tasks"] = tuple(json.loads(row["tasks"]))
            for name in ("started_at", "last_seen_at", "stopped_at"):
                if row[name] is not None:
                    row[name] = to_datetime(row[name])
            workers.append(WorkerInfo(**row))
        return workers
