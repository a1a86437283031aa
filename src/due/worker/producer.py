"""The producer of one queue: claims due jobs in batches up to its free slots.

Each queue has its own producer and its own concurrency inside the process,
so a flood on `bulk` never takes a slot of `emails`. A producer claims as many
jobs as it has free slots (one statement), then sleeps until a slot frees, a
wake-up says its queue has work, or its next job comes due — computed from the
store's next due time, so a delayed job starts on time without a
notification. A poll every `poll_interval` covers a lost wake-up.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from due.logs import event
from due.worker.settings import MAX_CLAIM_BATCH

if TYPE_CHECKING:
    from due.worker.worker import Worker

log = logging.getLogger("due.worker")
RECHECK_SECONDS = 0.005
"""Pause before claiming again when a due job was not ours to take (another
claimer held its row): it is committed within milliseconds."""


class QueueProducer:
    def __init__(self, worker: Worker, queue: str, concurrency: int) -> None:
        self.worker = worker
        self.queue = queue
        self.concurrency = concurrency
        self.active = 0
        """Jobs whose handler is running (stragglers included)."""
        self.next_due: datetime | None = None
        self.claim_requested = True
        self._last_claim = float("-inf")

    @property
    def free_slots(self) -> int:
        return self.concurrency - self.active

    def request_claim(self) -> None:
        """Something may be due now: claim at the next turn."""
        self.claim_requested = True
        self.worker.wake_producer(self)

    def note_due(self, run_at: datetime) -> None:
        """A job of this queue comes due at `run_at` (from a notification)."""
        if run_at <= self.worker.database_now():
            self.request_claim()
        elif self.next_due is None or run_at < self.next_due:
            self.next_due = run_at
            self.worker.wake_producer(self)

    def slot_freed(self) -> None:
        self.active -= 1
        self.request_claim()

    async def run_once(self) -> int:
        """Claim up to the free slots when something may be due; returns how many."""
        free = self.free_slots
        if free <= 0 or self.worker.stopping or not self._worth_claiming():
            return 0
        self.claim_requested = False
        self._last_claim = self.worker.clock.monotonic()
        jobs = await self.worker.claim(self.queue, min(free, MAX_CLAIM_BATCH))
        for job in jobs:
            self.worker.start(job, self, self._last_claim)
        if len(jobs) < free:
            self.next_due = await self.worker.next_due(self.queue)
        else:
            self.next_due = None  # more may be waiting: claim again when a slot frees
            self.claim_requested = True
        if jobs:
            event(log, "queue.claimed", logging.DEBUG, queue=self.queue, jobs=len(jobs))
        return len(jobs)

    def _worth_claiming(self) -> bool:
        if self.claim_requested or self.next_due is None:
            return True
        since_last = self.worker.clock.monotonic() - self._last_claim
        return self.seconds_until_due() <= 0 or since_last >= self.worker.settings.poll_interval

    def seconds_until_due(self) -> float:
        if self.next_due is None:
            return float("inf")
        return (self.next_due - self.worker.database_now()).total_seconds()

    def interval(self) -> float:
        """How long to sleep before the next turn (a wake-up cuts it short)."""
        poll = self.worker.settings.poll_interval
        if self.free_slots <= 0:
            return poll
        if self.claim_requested:
            return 0.0
        until_due = self.seconds_until_due()
        if until_due <= 0:
            return RECHECK_SECONDS
        return min(until_due, poll)
