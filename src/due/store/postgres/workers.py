"""The registry of worker processes, on PostgreSQL (a mixin of PostgresStore)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from due.core.records import WorkerInfo
from due.store.postgres.base import PostgresBase, normalise


class PostgresWorkers(PostgresBase):
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
        self._all("register_worker", params)

    def touch_worker(self, worker: str) -> None:
        self._all("touch_worker", {"id": worker, "now": self._now()})

    def set_worker_state(self, worker: str, state: str) -> None:
        self._all("set_worker_state", {"id": worker, "state": state, "now": self._now()})

    def mark_gone_workers(self, after_seconds: float) -> list[str]:
        rows = self._all("mark_gone_workers", {"after": float(after_seconds), "now": self._now()})
        return [row["id"] for row in rows]

    def list_workers(self, limit: int = 100) -> list[WorkerInfo]:
        rows = self._all("list_workers", {"limit": limit})
        return [WorkerInfo(**{**normalise(row), "tasks": tuple(row["tasks"])}) for row in rows]
