"""The producer of one queue: claims due jobs in batches, starts them in its slots.

Each queue has its own producer and its own concurrency inside the process,
so a flood on `bulk` never takes a slot of `emails`. A producer claims its
free slots' worth of jobs in one statement, then sleeps until a slot frees, a
wake-up says its queue has work, or its next job comes due — computed from
the store's next due time, so a delayed job starts on time without a
notification. A poll every `poll_interval` covers a lost wake-up.

Lookahead: a slot that frees would otherwise stay idle for a whole claim
round trip. So the producer also claims a few jobs ahead — as many as its
slots finish during one claim, estimated from the measured job duration and
claim latency, at most half its concurrency — and starts one the instant a
slot frees. For long jobs that estimate is zero: no job ever waits behind a
long one in this worker while another worker could run it. Jobs claimed
ahead are leased and heartbeated like running ones, and released at once on
shutdown.

Back-pressure: ended jobs whose outcome is not written yet may number as
many as the queue's slots; beyond that, each takes a slot until it is written.
Without a bound, a worker whose handlers end faster than its acknowledgements
are written claims on and on (measured: 33,000 ended, unwritten jobs after
4 s of no-op jobs), every heartbeat renews them all, which slows the
acknowledgements further, and a crash would run them all again. Within the
bound, a slot frees when its handler ends, so acknowledgement latency does not
lengthen every job.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from datetime import datetime
from typing import TYPE_CHECKING

from due.logs import event
from due.worker.running import RunningJob
from due.worker.settings import MAX_CLAIM_BATCH

if TYPE_CHECKING:
    from due.worker.worker import Worker

log = logging.getLogger("due.worker")
RECHECK_SECONDS = 0.005
"""Pause before claiming again when a due job was not ours to take (another
claimer held its row): it is committed within milliseconds."""
SMOOTHING = 0.2
"""Weight of a new sample in the moving averages of job and claim durations."""


class QueueProducer:
    def __init__(self, worker: Worker, queue: str, concurrency: int) -> None:
        self.worker = worker
        self.queue = queue
        self.concurrency = concurrency
        self.active = 0
        """Jobs whose handler is running (stragglers past their timeout included)."""
        self.unwritten = 0
        """Jobs whose handler ended and whose outcome is not written yet."""
        self.ready: deque[RunningJob] = deque()
        """Jobs claimed ahead, waiting for a slot."""
        self.next_due: datetime | None = None
        self.claim_requested = True
        self.job_seconds: float | None = None
        self.claim_seconds: float | None = None
        self._last_claim = float("-inf")

    @property
    def free_slots(self) -> int:
        return self.concurrency - self.active - max(0, self.unwritten - self.concurrency)

    @property
    def lookahead(self) -> int:
        """How many jobs to hold ready beyond the free slots."""
        if self.job_seconds is None or self.claim_seconds is None:
            return 0
        finishing = self.concurrency * self.claim_seconds / max(self.job_seconds, 1e-4)
        return min(self.concurrency // 2, math.floor(finishing + 0.5))

    def wanted(self) -> int:
        return self.free_slots + self.lookahead - len(self.ready)

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

    def add(self, running: RunningJob) -> None:
        """A job just claimed: run it now if a slot is free, else hold it ready."""
        if self.free_slots > 0 and not self.worker.stopping:
            self._launch(running)
        else:
            self.ready.append(running)

    def slot_freed(self, job_seconds: float | None = None) -> None:
        """A handler ended (its outcome, if any, was queued first: see outcome_pending)."""
        self.active -= 1
        if job_seconds is not None:
            self.job_seconds = _smooth(self.job_seconds, job_seconds)
        self._start_ready()

    def slots_freed_by_writing(self, outcomes: int) -> int:
        """How many slots writing this many of its pending outcomes frees."""
        held_now = max(0, self.unwritten - self.concurrency)
        return held_now - max(0, self.unwritten - outcomes - self.concurrency)

    def outcome_pending(self) -> None:
        self.unwritten += 1

    def outcome_written(self) -> None:
        """An outcome was written (or found stale): its slot is free now."""
        self.unwritten -= 1
        self._start_ready()

    def _start_ready(self) -> None:
        while self.ready and self.free_slots > 0 and not self.worker.stopping:
            running = self.ready.popleft()
            if not running.lost:
                self._launch(running)
        self.request_claim()

    def discard_ready(self, running: RunningJob) -> None:
        if running in self.ready:
            self.ready.remove(running)

    def _launch(self, running: RunningJob) -> None:
        self.active += 1
        self.worker.launch(running, self)

    async def run_once(self) -> int:
        """Claim what is wanted when something may be due; returns how many."""
        wanted = self.wanted()
        if wanted <= 0 or self.worker.stopping or not self._worth_claiming():
            return 0
        self.claim_requested = False
        sent_at = self._last_claim = self.worker.clock.monotonic()
        jobs = await self.worker.claim(self.queue, min(wanted, MAX_CLAIM_BATCH))
        self.claim_seconds = _smooth(self.claim_seconds, self.worker.clock.monotonic() - sent_at)
        for job in jobs:
            self.worker.start(job, self, sent_at)
        if len(jobs) < wanted:
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
        if self.wanted() <= 0:
            return poll
        if self.claim_requested:
            return 0.0
        until_due = self.seconds_until_due()
        if until_due <= 0:
            return RECHECK_SECONDS
        return min(until_due, poll)


def _smooth(average: float | None, sample: float) -> float:
    return sample if average is None else average + SMOOTHING * (sample - average)
