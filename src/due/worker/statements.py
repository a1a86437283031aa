"""The worker's own statements, made from its event loop: claims, next due
times, acknowledgements, lease renewals, and its row in the registry.

On a single-writer store (SQLite) the outcomes waiting to be written ride
along with each claim: one transaction for both. Claims and acknowledgements
go on the loop's own connections where the store has them (PostgreSQL: the
lane, which the worker opens while it runs), and through a database thread
otherwise, or when the lane fails them (said at INFO once a minute).
Renewals and the row's touch go through the heartbeat's own thread.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from datetime import datetime

from due.clock import Clock
from due.core.records import (
    ClaimedJob,
    ClaimRequest,
    Completion,
    HeartbeatReply,
    Lease,
    WorkerRegistration,
)
from due.errors import StoreError
from due.logs import event
from due.store.backend import Lane
from due.store.store import Store
from due.worker.calls import StoreCalls
from due.worker.completer import Completer
from due.worker.ledger import RunningJobs
from due.worker.settings import MAX_CLAIM_BATCH, WorkerSettings

log = logging.getLogger("due.worker")
LANE_FAILURE_LOG_SECONDS = 60.0


class Statements:
    completer: Completer
    """Whose outcomes ride along with a single-writer store's claims (set by the
    worker once built: it writes through `write_outcomes`)."""

    def __init__(
        self,
        *,
        store: Store,
        call: StoreCalls,
        heartbeat_call: StoreCalls,
        clock: Clock,
        settings: WorkerSettings,
        task_names: list[str],
        task_leases: dict[str, float],
        limited: bool,
        wake_all: Callable[[], None],
    ) -> None:
        self.store = store
        self._call = call
        self._heartbeat_call = heartbeat_call
        self._clock = clock
        self._settings = settings
        self._task_names = task_names
        self._task_leases = task_leases
        self._limited = limited
        self._wake_all = wake_all
        self.lane: Lane | None = None
        """Claims and acknowledgements from the loop, without a thread (PostgreSQL);
        set by the worker's run(), in its loop."""
        self._lane_failure_said_at = float("-inf")

    def _claim_request(self, jobs: RunningJobs, limit: int, freed: int = 0) -> ClaimRequest:
        # Limited jobs only for the slots free now (the jobs held ready take
        # theirs first): one claimed ahead would hold its limit's slot while
        # it waits for one of ours, or begin too late for its rate.
        free = max(0, jobs.free_slots + freed - len(jobs.ready))
        return ClaimRequest(
            jobs.queue,
            limit,
            self._settings.worker_id,
            self._settings.lease,
            self._task_names,
            self._task_leases,
            self._limited,
            free if self._limited else None,
        )

    async def claim(self, jobs: RunningJobs, limit: int) -> list[ClaimedJob]:
        """Claim jobs; with a single-writer store, the pending outcomes ride along."""
        if not self.store.single_writer:
            request = self._claim_request(jobs, limit)
            if self.lane is not None:
                try:
                    return await self.store.job_claim_on_loop(self.lane, request)
                except StoreError as error:
                    self._lane_failed("claim", error)
            return await self._call(self.store.job_claim, request)
        outcomes = self.completer.take()
        # Slots the carried outcomes free are free once the claim commits with them.
        freed = jobs.slots_freed_by_writing(sum(1 for r, _ in outcomes if r.jobs is jobs))
        try:
            applied, claimed = await self._call(
                self.store.job_complete_and_claim,
                [completion for _, completion in outcomes],
                self._claim_request(jobs, min(limit + freed, MAX_CLAIM_BATCH), freed),
            )
        except BaseException:
            self.completer.give_back(outcomes)
            raise
        self.completer.acknowledge(outcomes, applied)
        return claimed

    async def next_due(self, queue: str) -> datetime | None:
        return await self._call(self.store.job_next_due, queue, self._task_names, self._limited)

    async def write_outcomes(self, completions: Sequence[Completion]) -> set[int]:
        written = await self._write_outcomes_once(completions)
        if self._limited and written:
            # A limited job's slot frees when its end commits, here, and the
            # jobs waiting for it were let go then (store/limit_claims.py); the
            # claim its end called for may have gone out first and counted it
            # still running: claim again now rather than after the poll interval.
            self._wake_all()
        return written

    async def _write_outcomes_once(self, completions: Sequence[Completion]) -> set[int]:
        if self.lane is not None:
            try:
                written = await self.store.job_complete_on_loop(self.lane, completions)
                if written is not None:
                    return written
            except StoreError as error:
                self._lane_failed("acknowledgement", error)
        return await self._call(self.store.job_complete, completions)

    async def renew(self, leases: Sequence[Lease], deadline: float) -> HeartbeatReply:
        return await self._heartbeat_call.within(deadline, self.store.job_heartbeat, leases)

    async def touch(self, deadline: float) -> None:
        found = await self._heartbeat_call.within(
            deadline, self.store.worker_touch, self._settings.worker_id
        )
        if not found:  # pruned while this process was silent (paused, cut off)
            await self._heartbeat_call.within(
                deadline, self.store.worker_register, self.registration()
            )

    async def register(self) -> None:
        await self._call(self.store.worker_register, self.registration())

    def registration(self) -> WorkerRegistration:
        return WorkerRegistration(
            self._settings.worker_id,
            socket.gethostname(),
            os.getpid(),
            self._settings.queues,
            self._task_names,
        )

    async def set_state(self, state: str, recycled: str | None = None) -> None:
        try:
            await self._call(self.store.worker_set_state, self._settings.worker_id, state, recycled)
        except StoreError as error:
            event(
                log,
                "worker.state_not_recorded",
                logging.WARNING,
                state=state,
                recycled=recycled,
                error=str(error),
            )

    def _lane_failed(self, call: str, error: StoreError) -> None:
        """A statement the loop's connections could not carry goes through a thread
        instead (where an outage is met, and logged, as everywhere else): said at
        INFO once a minute, at DEBUG in between."""
        now, level = self._clock.monotonic(), logging.DEBUG
        if now - self._lane_failure_said_at >= LANE_FAILURE_LOG_SECONDS:
            self._lane_failure_said_at, level = now, logging.INFO
        event(log, "worker.loop_lane_failed", level, call=call, error=str(error))
