"""Acknowledgements, written in batches.

A finished attempt's completion is buffered and written with the others that
finish within `flush_interval` (one statement per batch), so a worker running
thousands of short jobs a second spends one round trip per batch, not per job.
On SQLite (one writer at a time), when a producer claims in the meantime, the
batch rides along with the claim: one transaction, one fsync, for both.
Until its completion is written the job keeps its lease (heartbeats go on)
and its slot (back-pressure: see producer.py).
A write that finds the token stale (the lease was lost meanwhile) is recorded
nowhere and logged. On a database outage the batch is kept and retried.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from due.core.jobs import JobState
from due.core.records import Completion
from due.logs import event
from due.worker.running import RunningJob

if TYPE_CHECKING:
    from due.worker.worker import Worker

log = logging.getLogger("due.worker")
MAX_BATCH = 1000


class Completer:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.pending: list[tuple[RunningJob, Completion]] = []
        self.wake = asyncio.Event()

    def add(self, running: RunningJob, completion: Completion) -> None:
        self.pending.append((running, completion))
        self.worker.producers[running.queue].outcome_pending()
        self.wake.set()

    def interval(self) -> float:
        return 3600.0 if not self.pending else self.worker.settings.flush_interval

    async def run_once(self) -> int:
        """Write one batch of completions; returns how many were written."""
        batch = self.take()
        if not batch:
            return 0
        try:
            applied = await self.worker.complete([completion for _, completion in batch])
        except BaseException:
            self.give_back(batch)
            raise
        self.acknowledge(batch, applied)
        return len(batch)

    def take(self) -> list[tuple[RunningJob, Completion]]:
        """The next batch to write (a claim may carry it, in one transaction)."""
        batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
        return batch

    def give_back(self, batch: list[tuple[RunningJob, Completion]]) -> None:
        """A batch whose write failed: kept, in order, for the retry."""
        self.pending[:0] = batch

    def acknowledge(self, batch: list[tuple[RunningJob, Completion]], applied: set[int]) -> None:
        for running, completion in batch:
            self._acknowledged(running, completion, running.job.id in applied)

    async def flush(self) -> None:
        """Write everything pending (at shutdown)."""
        while self.pending:
            await self.run_once()

    def _acknowledged(self, running: RunningJob, completion: Completion, applied: bool) -> None:
        self.worker.forget(running)
        self.worker.producers[running.queue].outcome_written()
        job = running.job
        if not applied:
            event(
                log,
                "job.result_discarded",
                logging.WARNING,
                job=job.id,
                task=job.task,
                attempt=job.attempt,
                reason="the lease was lost before the result was written",
            )
            return
        fields = {
            "job": job.id,
            "task": job.task,
            "queue": job.queue,
            "attempt": job.attempt,
            "duration_ms": None if running.seconds is None else round(running.seconds * 1000, 1),
        }
        error = completion.error.error if completion.error else None
        if completion.state == JobState.SUCCEEDED:
            event(log, "job.succeeded", logging.INFO, **fields)
        elif completion.state == JobState.QUEUED:
            retry_in = round(completion.retry_in or 0, 3)
            event(log, "job.retrying", logging.WARNING, **fields, retry_in=retry_in, error=error)
        elif completion.state == JobState.WAITING:
            event(log, "job.waiting", logging.INFO, **fields)
        elif completion.state == JobState.CANCELLED:
            event(log, "job.cancelled", logging.INFO, **fields)
        else:
            event(log, "job.failed", logging.ERROR, **fields, error=error)
