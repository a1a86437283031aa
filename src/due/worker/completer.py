"""Acknowledgements, written in batches.

A finished attempt's completion is buffered and written with the others that
finish within `flush_interval` (one statement per batch), so a worker running
thousands of short jobs a second spends one round trip per batch, not per job.
On SQLite (one writer at a time), when a producer claims in the meantime, the
batch rides along with the claim: one transaction, one fsync, for both.
Until its completion is written the job keeps its lease (heartbeats go on)
and its slot (back-pressure: see ledger.py). Outcomes wait in their queue's
ledger; the completer takes them from every queue's.
A write that finds the token stale (the lease was lost meanwhile) is recorded
nowhere and logged. On a database outage the batch is kept and retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from due.core.jobs import JobState
from due.core.records import Completion
from due.logs import event
from due.worker.ledger import Outcome, RunningJobs
from due.worker.running import RunningJob
from due.worker.tally import Tally

log = logging.getLogger("due.worker")
MAX_BATCH = 1000
IDLE_SECONDS = 3600.0
MIN_FLUSH_SECONDS = 0.001
"""The completer's floor: an acknowledgement waits at least this for others to
share its statement, whatever `flush_interval` says (more waiting wakes it)."""

Write = Callable[[Sequence[Completion]], Awaitable[set[int]]]
"""Writes completions; returns the ids whose end is recorded (the token was
still current, or an earlier try of the same write whose reply was lost wrote it)."""


class Completer:
    def __init__(
        self,
        *,
        ledgers: Sequence[RunningJobs],
        write: Write,
        flush_interval: float,
        tally: Tally | None = None,
    ) -> None:
        self.ledgers = ledgers
        self.write = write
        self.flush_interval = flush_interval
        self.tally = tally or Tally()
        self.wake = asyncio.Event()

    @property
    def pending(self) -> list[Outcome]:
        """Outcomes waiting to be taken, every queue's."""
        return [outcome for jobs in self.ledgers for outcome in jobs.outcomes]

    def interval(self) -> float:
        if not any(jobs.outcomes for jobs in self.ledgers):
            return IDLE_SECONDS
        return max(self.flush_interval, MIN_FLUSH_SECONDS)

    async def run_once(self) -> int:
        """Write one batch of completions; returns how many were written."""
        batch = self.take()
        if not batch:
            return 0
        try:
            applied = await self.write([completion for _, completion in batch])
        except BaseException:
            self.give_back(batch)
            raise
        self.acknowledge(batch, applied)
        if any(jobs.outcomes for jobs in self.ledgers):
            # More than a batch was waiting: a ledger calls again only on its first.
            self.wake.set()
        return len(batch)

    def take(self) -> list[Outcome]:
        """The next batch to write (a claim may carry it, in one transaction)."""
        batch: list[Outcome] = []
        for jobs in self.ledgers:
            batch += jobs.take_outcomes(MAX_BATCH - len(batch))
        return batch

    def give_back(self, batch: list[Outcome]) -> None:
        """A batch whose write failed: each outcome back in its ledger, in order."""
        for jobs in self.ledgers:
            jobs.give_back([outcome for outcome in batch if outcome[0].jobs is jobs])

    def acknowledge(self, batch: list[Outcome], applied: set[int]) -> None:
        # A plain success is logged at INFO (_end_event): below it, its line is
        # not even looked at, thousands of times a second.
        quiet = not log.isEnabledFor(logging.INFO)
        for running, completion in batch:
            running.jobs.outcome_written(running)
            written = running.job.id in applied
            plain_success = completion.state is JobState.SUCCEEDED and completion.warning is None
            if not (quiet and written and plain_success):
                _log_end(running, completion, written)
            self.tally.ended(_state(running, completion), written)

    async def flush(self) -> None:
        """Write everything pending (at shutdown)."""
        while self.pending:
            await self.run_once()


def _state(running: RunningJob, completion: Completion) -> JobState:
    """The state the store gives the job: one asked to stop ends cancelled."""
    if running.cancel_requested and completion.state != JobState.WAITING:
        return JobState.CANCELLED
    return completion.state


def _log_end(running: RunningJob, completion: Completion, applied: bool) -> None:
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
    name, level = _end_event(completion)
    if running.cancel_requested and completion.state != JobState.WAITING:
        # The store ends a job asked to stop cancelled, whatever its attempt did.
        name, level = "job.cancelled", logging.INFO
    if not log.isEnabledFor(level):
        return  # a line per job: its fields are built only when it is written
    fields = {
        "job": job.id,
        "task": job.task,
        "queue": job.queue,
        "attempt": job.attempt,
        "duration_ms": None if running.seconds is None else round(running.seconds * 1000, 1),
    }
    error = completion.error.error if completion.error else None
    if name == "job.warned":
        fields["warning"] = completion.warning
    elif name == "job.retrying":
        fields |= {"retry_in": round(completion.retry_in or 0, 3), "error": error}
    elif name == "job.failed":
        fields["error"] = error
    event(log, name, level, **fields)


def _end_event(completion: Completion) -> tuple[str, int]:
    """The log event of an attempt's end, and its level."""
    state = completion.state
    if state == JobState.SUCCEEDED:
        if completion.warning is None:
            return "job.succeeded", logging.INFO
        return "job.warned", logging.WARNING
    if state == JobState.QUEUED:
        return "job.retrying", logging.WARNING
    if state == JobState.WAITING:
        return "job.waiting", logging.INFO
    if state == JobState.CANCELLED:
        return "job.cancelled", logging.INFO
    return "job.failed", logging.ERROR
