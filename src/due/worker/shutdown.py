"""The worker's shutdown: drain within the grace, then hand back what still runs.

On SIGTERM/SIGINT the worker stops claiming (worker.py), and this takes over:

1. Jobs claimed ahead have not started: they are released at once, due again
   for another worker.
2. Running jobs get the grace (`--grace`) to finish; their outcomes are
   written as usual.
3. Past the grace, each handler still running is told to stop (its next safe
   point raises LeaseLost; an async handler is cancelled at its next await)
   and gets SAFE_POINT_SECONDS to get there. A handler that returns meanwhile
   has its outcome written: the lease is still this worker's.
4. Only then does each attempt stop being trusted, and the release is written,
   its token moved on so the old attempt can write nothing more, its attempt
   not counted: due again at once when the handler has ended; handed back as
   it stands when a sync handler's thread still works (nothing can interrupt
   a thread): due only once the lease it held expires (cut to HANDBACK_SECONDS
   at most), by when this process has exited and taken the thread with it
   (worker/main.py exits without waiting for busy threads, and is forced to
   before the earliest such lease can end: `exit_within`). Waiting for the lease rather than for the
   thread bounds the shutdown, and the lease is what another worker would
   have trusted had this one died.
5. Pending acknowledgements are written before the process exits.

A second signal skips the waits: the grace and, for sync handlers, the safe
point (async handlers, cancelled, still end at the loop's next turn).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from due.clock import Clock
from due.errors import StoreError
from due.logs import event
from due.service import Calls, wait_for_any
from due.store.store import Store
from due.worker.completer import Completer
from due.worker.runner import Runner
from due.worker.running import RunningJob

log = logging.getLogger("due.worker")
SAFE_POINT_SECONDS = 1.0
"""After the grace: how long a handler told to stop has to reach its next safe
point before its job is handed back (a second signal skips it)."""
FLUSH_TRIES = 5
SECOND_SIGNAL_NOTE = (
    "a second Ctrl-C (SIGINT or SIGTERM) stops at once and hands the running jobs back"
)
"""Said when the drain begins: the way out of a grace the operator will not
wait for, and what it costs (the jobs go to another worker, no attempt spent)."""
HANDBACK_SECONDS = 10.0
"""A job handed back with its handler thread still running is due at most this
long after the release (however long its task's lease); the worker process
must exit within half of it (`exit_within`: worker/main.py's forced exit)."""


class Shutdown:
    def __init__(
        self,
        *,
        store: Store,
        call: Calls,
        runner: Runner,
        completer: Completer,
        unfinished: Callable[[], list[RunningJob]],
        set_state: Callable[[str], Awaitable[None]],
        worker_id: str,
        grace: float,
        hard_stop: asyncio.Event,
        clock: Clock,
        exit_within: Callable[[float], None] = lambda seconds: None,
        on_released: Callable[[int], None] = lambda jobs: None,
    ) -> None:
        self._store = store
        self._call = call
        self._runner = runner
        self._completer = completer
        self._unfinished = unfinished
        self._set_state = set_state
        self._worker_id = worker_id
        self._grace = grace
        self._hard_stop = hard_stop
        self._clock = clock
        self._exit_within = exit_within
        self._on_released = on_released

    async def drain_and_release(self) -> None:
        await self._set_state("stopping")
        await self._release([r for r in self._unfinished() if r.handle is None])
        unfinished = self._unfinished()
        if unfinished and not self._hard_stop.is_set():
            event(
                log,
                "worker.draining",
                jobs=len(unfinished),
                grace=self._grace,
                note=SECOND_SIGNAL_NOTE,
            )
            await self._wait_for_handlers(unfinished, self._grace)
        await self._release_running(self._unfinished())
        await self._flush_acknowledgements()

    async def _release_running(self, unfinished: list[RunningJob]) -> None:
        """Steps 3 and 4 of the module's docstring."""
        if not unfinished:
            return
        for running in unfinished:
            self._runner.stop_at_safe_point(running, "released at shutdown")
        await self._wait_for_handlers(unfinished, SAFE_POINT_SECONDS)
        # Stopped at a safe point (lost) or still working: handed back. One that
        # returned has its outcome recorded, written with the others.
        unfinished = [r for r in unfinished if r.lost or not r.finished]
        for running in unfinished:
            self._runner.lease_lost(running, "released at shutdown", level=logging.INFO)
        working = [r for r in unfinished if not _handler_done(r)]
        if working:
            # The process must be gone, and these threads with it, before any of
            # their leases can end: by its trust deadline, and well within the
            # hand-back's own bound.
            deadline = min(r.trusted_until for r in working) - self._clock.monotonic()
            exit_in = max(0.0, min(deadline, HANDBACK_SECONDS / 2))
            event(
                log,
                "worker.handed_back_running",
                logging.WARNING,
                jobs=len(working),
                exit_within=round(exit_in, 3),
                note="their handler threads still ran: due again once their leases expire",
            )
            self._exit_within(exit_in)
        await self._release(unfinished, later={r.job.id for r in working})

    async def _wait_for_handlers(self, held: list[RunningJob], seconds: float) -> None:
        """Until every handler of `held` has ended or `seconds` pass. After a
        second signal, only for the async ones (told to stop, they are
        cancelled and end at the loop's next turn), where a sync one may run on."""
        hurry = self._hard_stop.is_set()
        handles = [
            r.straggler or r.handle
            for r in held
            if r.handle is not None and not (hurry and not r.task.is_async)
        ]
        if not handles:
            return
        waiter = asyncio.ensure_future(asyncio.wait(handles))
        stop = asyncio.Event() if hurry else self._hard_stop  # (set already: no wait)
        await wait_for_any(stop, _event_when_done(waiter), seconds)
        waiter.cancel()

    async def _release(self, unfinished: list[RunningJob], later: set[int] | None = None) -> None:
        if not unfinished:
            return
        reason = f"released by worker {self._worker_id} at shutdown"
        leases = [r.lease for r in unfinished]
        try:
            await self._call(
                self._store.job_release, leases, reason, later or set(), HANDBACK_SECONDS
            )
            self._on_released(len(unfinished))
        except StoreError as error:
            event(
                log,
                "worker.release_failed",
                logging.ERROR,
                error=str(error),
                jobs=len(unfinished),
                note="they will be rescued when their lease expires",
            )
        for running in unfinished:
            self._runner.lease_lost(running, "released at shutdown", level=logging.INFO)

    async def _flush_acknowledgements(self) -> None:
        for attempt in range(FLUSH_TRIES):
            try:
                await self._completer.flush()
                return
            except StoreError as error:
                event(log, "worker.flush_failed", logging.ERROR, error=str(error), attempt=attempt)
                await asyncio.sleep(0.5 * (attempt + 1))


def _handler_done(running: RunningJob) -> bool:
    """Whether the job's handler has ended (a sync one: its thread has returned)."""
    work = running.straggler or running.handle
    return work is None or work.done()


def _event_when_done(future: asyncio.Future[Any]) -> asyncio.Event:
    done = asyncio.Event()
    future.add_done_callback(lambda _: done.set())
    return done
