"""Functions run in child processes by multi-process tests (importable under spawn)."""

from __future__ import annotations

import json
import random
import time
from datetime import datetime
from typing import Any

import due
from due.clock import FakeClock
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion


def child_app(url: str, now_iso: str) -> due.App:
    return due.App(url, clock=FakeClock(datetime.fromisoformat(now_iso)))


def claim_until_empty(
    url: str, now_iso: str, worker: str, batch: int, out_path: str, start: Any
) -> None:
    """Claim and complete batches until the queue is empty; write the ids claimed."""
    app = child_app(url, now_iso)
    claimed: list[int] = []
    start.wait()
    while jobs := app.store.job_claim(ClaimRequest("default", batch, worker, 60.0)):
        claimed.extend(job.id for job in jobs)
        app.store.job_complete(
            [Completion(job.id, job.lease_token, JobState.SUCCEEDED, result="null") for job in jobs]
        )
        # A worker runs its jobs between claims. Without this pause, on SQLite the
        # process that got the write lock first could take it again and again
        # while the others' busy handlers slept (seen: [0, 5000, 0, 0]).
        time.sleep(0.001)
    app.close()
    with open(out_path, "w") as out:
        json.dump(claimed, out)


def enqueue_keys(
    url: str, now_iso: str, keys: list[str], seed: int, out_path: str, start: Any
) -> None:
    """Enqueue one job per key, in a shuffled order; write key -> job id."""
    app = child_app(url, now_iso)

    @app.task(name="keyed")
    def keyed(key: str) -> None: ...

    order = list(keys)
    random.Random(seed).shuffle(order)
    seen = {}
    start.wait()
    for key in order:
        seen[key] = keyed.options(key=key).enqueue(key).id
    app.close()
    with open(out_path, "w") as out:
        json.dump(seen, out)
