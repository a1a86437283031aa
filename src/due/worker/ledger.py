"""The ledger of one queue's jobs in this worker: slots, jobs claimed ahead,
and ended jobs whose outcome is not written yet.

Everything the worker counts about a queue's jobs is here, in one object
owned by the queue's producer: the runner records handler starts and ends
and outcomes, the completer takes outcomes to write and reports them
written, the producer reads the free slots and starts jobs held ready.

Back-pressure: ended jobs whose outcome is not written yet may number as
many as the queue's slots; beyond that, each takes a slot until it is
written. Without a bound, a worker whose handlers end faster than its
acknowledgements are written claims on and on (measured: 33,000 ended,
unwritten jobs after 4 s of no-op jobs), every heartbeat renews them all,
which slows the acknowledgements further, and a crash would run them all
again. Within the bound, a slot frees when its handler ends, so
acknowledgement latency does not lengthen every job.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from due.core.records import Completion
from due.worker.running import RunningJob

Outcome = tuple[RunningJob, Completion]


class RunningJobs:
    def __init__(
        self,
        queue: str,
        concurrency: int,
        *,
        on_slot_free: Callable[[float | None], None] = lambda seconds: None,
        on_outcome: Callable[[], None] = lambda: None,
    ) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self.held: dict[int, RunningJob] = {}
        """Every job whose lease this worker holds for the queue (claimed ahead,
        running, or ended and awaiting its acknowledgement)."""
        self.ready: deque[RunningJob] = deque()
        """Jobs claimed ahead, waiting for a slot."""
        self.active = 0
        """Jobs whose handler is running (stragglers past their timeout included)."""
        self.outcomes: list[Outcome] = []
        """Ended jobs' outcomes, waiting to be taken by the completer."""
        self.unwritten = 0
        """Ended jobs whose outcome is not written yet (waiting, or being written)."""
        self._on_slot_free = on_slot_free
        self._on_outcome = on_outcome

    @property
    def free_slots(self) -> int:
        return self.concurrency - self.active - max(0, self.unwritten - self.concurrency)

    # --- the runner's side -------------------------------------------------------

    def hold(self, running: RunningJob) -> None:
        self.held[running.job.id] = running

    def handler_started(self) -> None:
        self.active += 1

    def handler_ended(self, seconds: float | None = None) -> None:
        """A handler ended (its outcome, if any, was recorded first)."""
        self.active -= 1
        self._on_slot_free(seconds)

    def record_outcome(self, running: RunningJob, completion: Completion) -> None:
        self.outcomes.append((running, completion))
        self.unwritten += 1
        if len(self.outcomes) == 1:  # the completer takes them all: one call per batch
            self._on_outcome()

    def forget(self, running: RunningJob) -> None:
        """No longer held: its end is written, or its lease is gone."""
        if self.held.get(running.job.id) is running:
            del self.held[running.job.id]
        if running.handle is None and running in self.ready:  # only unstarted jobs wait there
            self.ready.remove(running)

    # --- the completer's side -------------------------------------------------------

    def take_outcomes(self, limit: int) -> list[Outcome]:
        taken, self.outcomes = self.outcomes[:limit], self.outcomes[limit:]
        return taken

    def give_back(self, outcomes: list[Outcome]) -> None:
        """Outcomes whose write failed: kept, in order, for the retry."""
        self.outcomes[:0] = outcomes

    def outcome_written(self, running: RunningJob) -> None:
        """Its outcome was written (or found stale): the slot it held, if it held
        one (beyond the bound), is free now."""
        self.forget(running)
        self.unwritten -= 1
        if self.unwritten >= self.concurrency:
            self._on_slot_free(None)

    def slots_freed_by_writing(self, outcomes: int) -> int:
        """How many slots writing this many of its pending outcomes frees."""
        held_now = max(0, self.unwritten - self.concurrency)
        return held_now - max(0, self.unwritten - outcomes - self.concurrency)

    # --- for the shutdown -------------------------------------------------------------

    def unfinished(self) -> list[RunningJob]:
        """Held jobs whose handler has not ended (or never started)."""
        return [r for r in self.held.values() if not r.finished and not r.lost]
