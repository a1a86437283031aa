"""Heartbeats: one statement renews the leases of all the worker's jobs.

Every `lease / 3` the worker sends the (job, token) pairs it holds. Jobs the
store did not renew have lost their lease (rescued and maybe taken by another
worker): the worker stops them at their next safe point and writes nothing
for them. Each lease carries the job's progress when it moved since the last
beat, and the reply carries cancellation requests (`Runner.request_cancel`).

Independently, each lease is trusted only until its last successful renewal +
lease * 0.8 on the monotonic clock: past that (the database was unreachable, or
this process was paused), the job is treated as lost without waiting for the
store to say so — another worker may already hold it. That deadline is kept by
a watch of its own (`TrustWatch`), so it fires on time whatever the heartbeat
call is doing: a call on a frozen connection (a partition, a hung proxy) can
block for as long as TCP takes to give up, and the job must have been told to
stop long before another worker's rescue starts it again. The heartbeat call
itself is abandoned when no lease it carries can still be saved by it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from due.clock import Clock
from due.core.records import HeartbeatReply, Lease
from due.errors import StoreError
from due.logs import event
from due.worker.running import RunningJob, trusted_until

log = logging.getLogger("due.worker")
UNTRUSTED = "the lease could not be renewed in time (trust deadline passed)"
START_REPORT_SECONDS = 0.25
"""How often the store is told which handlers have begun (`report_starts`):
within this quarter second of a start. A job that has ended by the next report
needs no word (its end says it): most short jobs cost nothing, a longer one
one row written, once. A worker that dies before its report has that attempt
given back uncounted (still counted as a lost lease, which bounds a job that
kills its workers); a last attempt's start is recorded before it begins."""

Held = Callable[[], list[RunningJob]]
"""The jobs whose lease this worker holds."""
OnLost = Callable[[RunningJob, str], None]


@dataclass(frozen=True, slots=True)
class HeartbeatRound:
    renewed: int = 0
    lost: int = 0
    untrusted: int = 0
    failed: bool = False


class Heartbeater:
    def __init__(
        self,
        *,
        held: Held,
        renew: Callable[[Sequence[Lease], float], Awaitable[HeartbeatReply]],
        touch: Callable[[float], Awaitable[None]],
        clock: Clock,
        lease: float,
        on_lost: OnLost,
        on_cancel: Callable[[int, str], None],
    ) -> None:
        self._held = held
        self._renew = renew
        self._touch = touch
        self._clock = clock
        self._lease = lease
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self.wake = asyncio.Event()
        """Set to beat now: a lease was claimed that must be renewed before the
        beat the loop sleeps until (`note_held`)."""
        self._next_beat = float("-inf")
        self._confirming: tuple[list[RunningJob], asyncio.Future[None]] | None = None
        """The jobs whose start this turn of the loop records (`confirm_start`)."""
        self.round_ended_at: float | None = None
        """When a round last ended, whatever its outcome (the liveness probe)."""
        self.reached_at: float | None = None
        """When the database last answered the registration touch (readiness)."""

    def interval(self) -> float:
        leases = [running.lease_seconds for running in self._held()]
        return min([self._lease, *leases]) / 3

    def note_held(self, running: RunningJob) -> None:
        """A job was just claimed. Its lease is renewed with the others; if it is
        shorter than the beat the loop sleeps until allows (a task's own
        `lease=`, claimed into an idle worker that sleeps a third of the default
        lease), the loop beats now and sleeps a third of the shortest lease
        from then: its trust deadline never passes before its first renewal."""
        if self._clock.monotonic() + running.lease_seconds / 3 < self._next_beat:
            self.wake.set()

    async def run_once(self) -> HeartbeatRound:
        renewed, lost, failed = await self._renew_leases(
            [running for running in self._held() if not running.lost]
        )
        # Apart from the renewal: a touch that fails must not throw its reply away.
        await self._touch_registration()
        untrusted = expire_untrusted(self._held(), self._clock, self._on_lost)
        self.round_ended_at = self._clock.monotonic()
        self._next_beat = self.round_ended_at + self.interval()
        return HeartbeatRound(renewed, lost, untrusted, failed)

    async def report_starts(self) -> int:
        """Say which handlers have begun since the last answered beat (their
        leases renewed with it): from then on their attempts count. Until then a
        rescue gives such a job back without counting the attempt — a claim's
        lost reply, or a worker that died before the handler began, costs
        none — so this runs every START_REPORT_SECONDS, apart from the beats,
        for the jobs still running (an end says it for the others). Returns
        how many it said."""
        started = [r for r in self._held() if r.start_unsent and not r.finished and not r.lost]
        if started:
            await self._renew_leases(started)
        return len(started)

    async def confirm_start(self, running: RunningJob) -> bool:
        """Record that this job's handler is about to begin, before it does, and
        say whether that was recorded (the lease renewed with it). For a job on
        its last attempt: should its worker then be cut off, the attempt counts
        (it is not run again beyond its attempts); should the record fail, the
        handler does not begin, and the job goes back uncounted. The jobs that
        ask in one turn of the loop are recorded in one statement."""
        running.start_unsent = True
        if self._confirming is None:
            loop = asyncio.get_running_loop()
            self._confirming = ([], loop.create_future())
            loop.call_soon(self._send_confirmations)
        batch, recorded = self._confirming
        batch.append(running)
        await asyncio.shield(recorded)
        return running.start_said and not running.lost

    def _send_confirmations(self) -> None:
        assert self._confirming is not None
        batch, recorded = self._confirming
        self._confirming = None
        sending = asyncio.ensure_future(self._renew_leases(batch))
        sending.add_done_callback(lambda sent: _settle(sent, recorded))

    async def _renew_leases(self, held: list[RunningJob]) -> tuple[int, int, bool]:
        """Renew these leases in one statement and act on the reply; returns how
        many were renewed and lost, and whether the call failed."""
        sent_at = self._clock.monotonic()
        leases = [running.lease_with_progress() for running in held]
        try:
            reply = await self._renew(leases, self._deadline(held, sent_at))
        except StoreError as error:
            for running, lease in zip(held, leases, strict=True):
                if lease.progress is not None:
                    running.progress_unsent()
            event(log, "worker.heartbeat_failed", logging.WARNING, error=str(error))
            return 0, 0, True
        renewed, lost = self._apply(held, leases, reply, sent_at)
        return renewed, lost, False

    def _apply(
        self, held: list[RunningJob], leases: list[Lease], reply: HeartbeatReply, sent_at: float
    ) -> tuple[int, int]:
        """Act on a renewal's reply; returns how many leases were renewed and lost."""
        renewed = lost = 0
        for running, lease in zip(held, leases, strict=True):
            answered = running.job.id in reply.extended or running.job.id in reply.lost
            if lease.progress is not None and not answered:
                running.progress_unsent()  # its row was busy: the progress goes next time
        for running, lease in zip(held, leases, strict=True):
            if running.job.id in reply.extended:
                running.trusted_until = trusted_until(sent_at, running.lease_seconds)
                if lease.started:
                    running.start_unsent = False
                    running.start_said = True
                renewed += 1
            elif running.job.id in reply.lost and not running.finished:
                # (A finished job's ack may have landed first: its writer reports it.)
                lost += 1
                self._on_lost(running, "the store no longer holds this lease")
        for job_id in reply.cancel_requested:
            self._on_cancel(job_id, "heartbeat")
        return renewed, lost

    async def _touch_registration(self) -> None:
        try:
            await self._touch(self.interval())
            self.reached_at = self._clock.monotonic()
        except StoreError as error:
            event(log, "worker.touch_failed", logging.WARNING, error=str(error))

    def _deadline(self, held: list[RunningJob], sent_at: float) -> float:
        """How long to wait for the renewal: until the last lease it could save is
        past trusting anyway (and at least one beat)."""
        latest = max((running.trusted_until for running in held), default=sent_at)
        return max(latest - sent_at, self.interval())


def _settle(sent: asyncio.Future[Any], recorded: asyncio.Future[None]) -> None:
    """The confirmations' write has ended, one way or another: their askers go on
    (each reads its own job's state)."""
    if not sent.cancelled() and sent.exception() is not None:
        event(log, "worker.start_record_failed", logging.ERROR, error=repr(sent.exception()))
    if not recorded.done():
        recorded.set_result(None)


def expire_untrusted(held: list[RunningJob], clock: Clock, on_lost: OnLost) -> int:
    """Give up every lease past its trust deadline; returns how many."""
    now = clock.monotonic()
    expired = [r for r in held if not r.lost and now > r.trusted_until]
    for running in expired:
        on_lost(running, UNTRUSTED)
    return len(expired)


MIN_WATCH_SECONDS = 0.02
MAX_WATCH_SECONDS = 1.0


class TrustWatch:
    """Ends trust in each lease at its deadline, on the monotonic clock, on its own:
    nothing it does can block on the database."""

    def __init__(self, *, held: Held, clock: Clock, on_lost: OnLost) -> None:
        self._held = held
        self._clock = clock
        self._on_lost = on_lost

    def interval(self) -> float:
        deadlines = [r.trusted_until for r in self._held() if not r.lost]
        if not deadlines:
            return MAX_WATCH_SECONDS
        until = min(deadlines) - self._clock.monotonic()
        return min(max(until, MIN_WATCH_SECONDS), MAX_WATCH_SECONDS)

    async def run_once(self) -> int:
        return expire_untrusted(self._held(), self._clock, self._on_lost)


class StartReports:
    """The heartbeater's `report_starts` as a service of its own, every
    START_REPORT_SECONDS (an idle worker's round reads only memory)."""

    def __init__(self, heartbeater: Heartbeater) -> None:
        self._heartbeater = heartbeater

    def interval(self) -> float:
        return START_REPORT_SECONDS

    async def run_once(self) -> int:
        return await self._heartbeater.report_starts()
