"""One shape for every background loop: `run_once()` on an interval until stopped.

A service's `run_once()` does one round of work and returns a small result
(tests call it directly). `run_forever` calls it until the stop event is set,
waits `interval()` between rounds (or until `wake` is set), and survives
errors: a database outage is logged and retried with capped exponential
backoff, so a worker rides out a restart of its database without restarting.

Clocks step (invariant 13): an interval computed from a time (a job's due
time, a schedule's next fire) can come out zero or negative when a clock
moved. So no wait is shorter than the loop's floor, whatever `interval()`
says: a wake-up still ends a wait at once (work, not time, asked for it).

Services take what they use, by keyword, and nothing else: the store, a way
to call it from the event loop (`Calls`), their settings, a clock. None of
them knows the worker that runs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from due.errors import StoreError
from due.logs import event

MAX_BACKOFF_SECONDS = 5.0
FIRST_BACKOFF_SECONDS = 0.1
MIN_INTERVAL_SECONDS = 0.001
"""The floor of every loop, below the floors of its own each service keeps: an
interval of zero, negative or NaN (a clock step, a bug) costs at most a
thousand rounds a second, never a loop that spins."""
T = TypeVar("T")


class Calls(Protocol):
    """Runs a blocking store call off the event loop (worker/calls.py's StoreCalls)."""

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T: ...


class Service(Protocol):
    """A background loop's one round, and how long to wait before the next."""

    def run_once(self) -> Awaitable[Any]: ...

    def interval(self) -> float: ...


async def run_forever(
    name: str,
    run_once: Callable[[], Awaitable[Any]],
    interval: Callable[[], float],
    stop: asyncio.Event,
    logger: logging.Logger,
    wake: asyncio.Event | None = None,
) -> None:
    backoff = FIRST_BACKOFF_SECONDS
    while not stop.is_set():
        try:
            await run_once()
        except StoreError as error:
            event(
                logger, f"{name}.store_error", logging.WARNING, error=str(error), retry_in=backoff
            )
            await wait_for_any(stop, None, backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            continue
        except Exception:
            logger.exception("%s.crashed; retrying in %.1fs", name, backoff)
            await wait_for_any(stop, None, backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            continue
        backoff = FIRST_BACKOFF_SECONDS
        await wait_for_any(stop, wake, floored(interval(), MIN_INTERVAL_SECONDS))


def floored(seconds: float, floor: float) -> float:
    """`seconds`, or `floor` when it is shorter (or not a number at all)."""
    return seconds if seconds >= floor else floor


class Recheck:
    """The wait before a loop looks again for work that the time said was due
    but the database did not hand over: `floor` the first time, doubled by each
    such look in a row up to `ceiling`, and `floor` again once work is found.

    A look finds nothing while the database's clock and this process's estimate
    of it disagree (a step not measured yet), or while another transaction holds
    the due row: either way looking again at once would spin.
    """

    def __init__(self, floor: float, ceiling: float) -> None:
        self.floor = floor
        self.ceiling = ceiling
        self.seconds = floor

    def found(self) -> None:
        self.seconds = self.floor

    def missed(self) -> None:
        self.seconds = min(self.seconds * 2, self.ceiling)


async def wait_for_any(stop: asyncio.Event, wake: asyncio.Event | None, timeout: float) -> None:
    """Sleep up to `timeout` seconds, less if `stop` or `wake` is set; clears `wake`."""
    events = [stop] if wake is None else [stop, wake]
    if any(e.is_set() for e in events):
        if wake is not None:
            wake.clear()
        return
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=max(timeout, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        if wake is not None:
            wake.clear()
