"""The producer of one queue: claims due jobs in batches, starts them in its slots.

Each queue has its own producer and its own concurrency inside the process,
so a flood on `bulk` never takes a slot of `emails`. A producer claims its
free slots' worth of jobs in one statement, then sleeps until a slot frees, a
wake-up says its queue has work, or its next job comes due — computed from
the store's next due time and the worker's estimate of the database's clock
(kept on the monotonic clock: a step of this host's wall clock does not move
it), so a delayed job starts on time without a notification. A poll every
`poll_interval` covers a lost wake-up. Only work claims at once (a full batch,
a wake-up, a slot freed); a wait the time calls for is never shorter than
`RECHECK_SECONDS` (but for the last few milliseconds before a due time: see
`interval`), and doubles while claims find nothing due.

Lookahead: a slot that frees would otherwise stay idle for a whole claim
round trip. So the producer also claims a few jobs ahead and starts one the
instant a slot frees: twice as many as its slots finish during one claim
(estimated from the measured job duration and claim latency), at most its
concurrency. Twice, because claims follow one another: a slot that frees just
after a claim left is refilled by the next one, two claim durations later.
With once as many, a queue of 10 ms jobs kept 45 of its 50 slots busy on
average; with twice, 48. For long jobs that estimate is zero: no job ever
waits behind a long one in this worker while another worker could run it.
Jobs claimed ahead are leased and heartbeated like running ones, and released
at once on shutdown.

The producer owns its queue's ledger (ledger.py): the slots, the jobs held
ready, the outcomes waiting to be written, and with them the back-pressure.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from datetime import datetime

from due.clock import Clock
from due.core.records import ClaimedJob
from due.logs import event
from due.service import Recheck
from due.worker.ledger import RunningJobs
from due.worker.running import RunningJob
from due.worker.settings import MAX_CLAIM_BATCH

log = logging.getLogger("due.worker")
RECHECK_SECONDS = 0.005
"""The producer's floor: the pause before claiming again when a due job was not
ours to take (another claimer held its row: it is committed within
milliseconds), and the shortest wait a due time can ask for."""
MAX_RECHECK_SECONDS = 0.5
"""The longest that pause grows to, doubling with each claim in a row that finds
nothing although a job looked due: the database's clock and the worker's
estimate of it disagree (a step not yet measured again), or a row stays held."""
MAX_CONTENDED_SECONDS = 0.02
"""The longest pause before claiming again after a claim that took nothing
because it passed over jobs whose limit key another claim held (no claim waits
for another: store/limit_claims.py). That claim commits within milliseconds,
unless its process froze, when the database ends it within seconds: 50 cheap
looks a second until then, rather than the half second a miss grows to."""
SMOOTHING = 0.2
"""Weight of a new sample in the moving averages of job and claim durations."""

Claim = Callable[[RunningJobs, int], Awaitable[list[ClaimedJob]]]
"""Claims up to n jobs of the ledger's queue (outcomes may ride along)."""


class QueueProducer:
    def __init__(
        self,
        *,
        queue: str,
        concurrency: int,
        claim: Claim,
        next_due: Callable[[str], Awaitable[datetime | None]],
        hold: Callable[[ClaimedJob, RunningJobs, float], RunningJob],
        launch: Callable[[RunningJob, RunningJobs], None],
        clock: Clock,
        database_now: Callable[[], datetime],
        poll_interval: float,
        on_outcome: Callable[[], None] = lambda: None,
    ) -> None:
        self.queue = queue
        self.jobs = RunningJobs(
            queue, concurrency, on_slot_free=self._slot_freed, on_outcome=on_outcome
        )
        self._claim = claim
        self._next_due_of = next_due
        self._hold = hold
        self._launch_job = launch
        self._clock = clock
        self._database_now = database_now
        self._poll_interval = poll_interval
        self.wake = asyncio.Event()
        self.stopping = False
        self.next_due: datetime | None = None
        self.claim_requested = True
        self.job_seconds: float | None = None
        self.claim_seconds: float | None = None
        self._last_claim = float("-inf")
        self._recheck = Recheck(RECHECK_SECONDS, MAX_RECHECK_SECONDS)
        self._contended = Recheck(RECHECK_SECONDS, MAX_CONTENDED_SECONDS)
        self._last_contended = False

    @property
    def concurrency(self) -> int:
        return self.jobs.concurrency

    @property
    def free_slots(self) -> int:
        return self.jobs.free_slots

    @property
    def ready(self) -> list[RunningJob]:
        return list(self.jobs.ready)

    @property
    def lookahead(self) -> int:
        """How many jobs to hold ready beyond the free slots."""
        if self.job_seconds is None or self.claim_seconds is None:
            return 0
        finishing = self.concurrency * self.claim_seconds / max(self.job_seconds, 1e-4)
        return min(self.concurrency, math.floor(2 * finishing + 0.5))

    def wanted(self) -> int:
        return self.free_slots + self.lookahead - len(self.jobs.ready)

    def request_claim(self) -> None:
        """Something may be due now: claim at the next turn."""
        self.claim_requested = True
        self.wake.set()

    def note_due(self, run_at: datetime) -> None:
        """A job of this queue comes due at `run_at` (from a notification)."""
        if run_at <= self._database_now():
            self.request_claim()
        elif self.next_due is None or run_at < self.next_due:
            self.next_due = run_at
            self.wake.set()

    def stop(self) -> None:
        """Claim nothing more, and start none of the jobs held ready."""
        self.stopping = True
        self.wake.set()

    def _place(self, running: RunningJob) -> None:
        """A job just claimed: run it now if a slot is free, else hold it ready."""
        if self.jobs.free_slots > 0 and not self.stopping:
            self._launch(running)
        else:
            self.jobs.ready.append(running)

    def _slot_freed(self, job_seconds: float | None) -> None:
        if job_seconds is not None:
            self.job_seconds = _smooth(self.job_seconds, job_seconds)
        jobs = self.jobs
        while jobs.ready and jobs.free_slots > 0 and not self.stopping:
            running = jobs.ready.popleft()
            if running.lost_reason is None:
                self._launch(running)
        self.request_claim()

    def _launch(self, running: RunningJob) -> None:
        self.jobs.handler_started()
        self._launch_job(running, self.jobs)

    async def run_once(self) -> int:
        """Claim what is wanted when something may be due; returns how many."""
        wanted = self.wanted()
        if wanted <= 0 or self.stopping or not self._worth_claiming():
            return 0
        looked_due = not self.claim_requested
        self.claim_requested = False
        sent_at = self._last_claim = self._clock.monotonic()
        asked = min(wanted, MAX_CLAIM_BATCH)
        jobs = await self._claim(self.jobs, asked)
        self.claim_seconds = _smooth(self.claim_seconds, self._clock.monotonic() - sent_at)
        for job in jobs:
            self._place(self._hold(job, self.jobs, sent_at))
        # Fewer than asked: nothing more is due, so when is the next? As many (a
        # batch at its cap, while more is wanted): claim again at once. Compared
        # with `wanted`, every full batch of a worker wanting more than the cap
        # (concurrency 1,000 and jobs held ready) asked for the next due time
        # first, a read and a thread's round trip in the way of the next claim.
        if len(jobs) < asked:
            if jobs:
                # The jobs just launched take their first step first: the next due
                # time is asked on a thread, which would wake and take the GIL
                # while they start (0.3 ms at the median of a pickup, 3-5 ms at the
                # 99th percentile on a loaded host; 0.1 and 0.3-2.6 ms after).
                await asyncio.sleep(0)
            self.next_due = await self._next_due_of(self.queue)
        else:
            self.next_due = None  # more may be waiting: claim again at once
            self.request_claim()
        self._paced(
            found=bool(jobs), looked_due=looked_due, contended=getattr(jobs, "contended", False)
        )
        if jobs:
            event(log, "queue.claimed", logging.DEBUG, queue=self.queue, jobs=len(jobs))
        return len(jobs)

    def _worth_claiming(self) -> bool:
        if self.claim_requested or self.next_due is None:
            return True
        since_last = self._clock.monotonic() - self._last_claim
        return self.seconds_until_due() <= 0 or since_last >= self._poll_interval

    def seconds_until_due(self) -> float:
        if self.next_due is None:
            return float("inf")
        return (self.next_due - self._database_now()).total_seconds()

    def _paced(self, *, found: bool, looked_due: bool, contended: bool = False) -> None:
        """A claim that the time alone called for and that found nothing, while
        the store still says a job is due, makes the next such wait longer; one
        that found work resets it. (Found nothing with the next due time now
        ahead is no miss: a limit's window that other workers filled, say, whose
        next opening is known: the wait goes to it, not to a doubled pause,
        which would make a rate fall behind window after window.) One that found
        nothing because another claim held a limit's key waits a short pause
        of its own (MAX_CONTENDED_SECONDS)."""
        self._last_contended = contended and not found
        if found:
            self._recheck.found()
            self._contended.found()
        elif contended:
            self._contended.missed()
        elif looked_due and self.seconds_until_due() <= 0:
            self._recheck.missed()

    def interval(self) -> float:
        """How long to sleep before the next turn (a wake-up cuts it short: work
        asked for, a full batch, a slot freed, set it)."""
        if self.wanted() <= 0:
            return max(self._poll_interval, RECHECK_SECONDS)
        until = self.seconds_until_due()
        if 0 < until < RECHECK_SECONDS:
            # Woken just before a due time: an event loop's timer can end a wait a
            # millisecond or more early (uvloop rounds it to whole milliseconds of a
            # clock it reads once a turn), and a turn before the time claims nothing.
            # Wake at the time, not a floor's length after it (a delayed job's
            # lateness, 5 ms at the 90th percentile). No spin: the time passes, and
            # no loop waits less than a millisecond (service.MIN_INTERVAL_SECONDS).
            return until
        pause = self._contended if self._last_contended else self._recheck
        return max(min(until, self._poll_interval), pause.seconds)


def _smooth(average: float | None, sample: float) -> float:
    return sample if average is None else average + SMOOTHING * (sample - average)
