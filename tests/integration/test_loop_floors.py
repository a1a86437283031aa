"""Every loop has a floor (invariant 13): no interval computed from the clocks, nor
one asked for in the settings, makes a loop spin.

The worker here runs on a fake host clock, apart from the database's (the
store's `FakeClock`), and the two then disagree by an hour, not yet measured
again: every due time the database gives within the hour looks past to the
worker, or an hour away.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import due
from due.clock import FakeClock
from due.maintenance.pruner import PRUNE_INTERVAL_SECONDS
from due.maintenance.rescuer import MIN_RESCUE_SECONDS
from due.maintenance.unknown_tasks import MIN_SWEEP_SECONDS
from due.maintenance.vacuum import VACUUM_CHECK_SECONDS
from due.scheduler import service as scheduler
from due.service import MIN_INTERVAL_SECONDS, run_forever
from due.task import MIN_LEASE_SECONDS
from due.worker import producer
from due.worker.clock_watch import MIN_CLOCK_INTERVAL
from due.worker.completer import MIN_FLUSH_SECONDS
from due.worker.heartbeat import MIN_WATCH_SECONDS, START_REPORT_SECONDS
from due.worker.settings import WorkerSettings
from due.worker.worker import Worker
from tests.helpers.clocks import FakeHostClock

FLOORS = {
    "completer": MIN_FLUSH_SECONDS,
    "heartbeat": MIN_LEASE_SECONDS / 3,  # a third of the shortest lease allowed
    "starts": START_REPORT_SECONDS,
    "trust": MIN_WATCH_SECONDS,
    "rescuer": MIN_RESCUE_SECONDS,
    "unknown_tasks": MIN_SWEEP_SECONDS,
    "scheduler": scheduler.RECHECK_SECONDS,
    "pruner": PRUNE_INTERVAL_SECONDS,
    "vacuum": VACUUM_CHECK_SECONDS,
    "clock": MIN_CLOCK_INTERVAL,
    "queue": producer.RECHECK_SECONDS,
}
ROUNDS = 12


@pytest.fixture
def worker(app: due.App, clock: FakeClock) -> Iterator[Worker]:
    """A worker whose settings ask for intervals of zero, with a job and a
    schedule due in half an hour by the database's clock."""

    @app.task(name="later")
    async def later() -> None: ...

    app.schedule("half_hourly", every="30m", task=later)
    app.sync_schedules()
    later.options(delay="30m").enqueue()
    zero = {"poll_interval": 0.0, "flush_interval": 0.0, "rescue_interval": 0.0}
    settings = WorkerSettings.build({"default": 4}, unknown_task_grace=0, clock_interval=0, **zero)
    made = Worker(app, settings, clock=FakeHostClock(clock.now() - timedelta(minutes=5)))
    yield made
    made.call.close()


async def intervals(service: Any, rounds: int = ROUNDS) -> list[float]:
    """The interval after each of `rounds` rounds (the service's own `run_once`)."""
    found = []
    for _ in range(rounds):
        await service.run_once()
        found.append(service.interval())
    return found


def rounds_in(seconds: float, waits: list[float]) -> int:
    """How many rounds a loop waiting `waits` makes in `seconds`."""
    return sum(1 for elapsed in _running_sum(waits) if elapsed <= seconds)


def _running_sum(values: list[float]) -> Iterator[float]:
    total = 0.0
    for value in values:
        total += value
        yield total


def test_times_that_look_due_but_are_not_cost_a_few_rounds_not_a_spin(
    worker: Worker, clock: FakeClock
) -> None:
    queue = worker.producers["default"]
    assert worker.scheduler is not None and isinstance(worker.clock, FakeHostClock)
    leader, host = worker.scheduler, worker.clock

    async def scenario() -> tuple[list[float], list[float]]:
        await worker.clock_watch.run_once()
        await leader.run_once()
        await queue.run_once()
        assert leader.leadership.is_leader and queue.next_due is not None
        # An hour passes on this host's clocks but not on the database's (as if its
        # clock had stepped back an hour): what is due in half an hour looks past.
        host.advance(3600)
        return await intervals(queue), await intervals(leader)

    by_queue, by_scheduler = asyncio.run(scenario())
    assert min(by_queue) >= producer.RECHECK_SECONDS and min(by_scheduler) >= FLOORS["scheduler"]
    assert rounds_in(1.0, by_queue) <= 8 and rounds_in(1.0, by_scheduler) <= 8
    assert by_queue[-1] == producer.MAX_RECHECK_SECONDS
    assert by_scheduler[-1] == scheduler.TICK_SECONDS
    assert worker.database_now() - clock.now() == timedelta(hours=1)  # not measured since


@pytest.mark.parametrize("database_step", [-1, 0, 1], ids=["back", "none", "ahead"])
def test_every_loops_interval_keeps_its_floor(
    worker: Worker, clock: FakeClock, database_step: int
) -> None:
    async def scenario() -> dict[str, float]:
        await worker.clock_watch.run_once()
        clock.set(clock.now() + timedelta(hours=database_step))
        waits = {}
        for name, service, _ in worker.services():
            await service.run_once()
            waits[name] = service.interval()
        queue = worker.producers["default"]
        await queue.run_once()
        waits["queue"] = queue.interval()
        return waits

    waits = asyncio.run(scenario())
    assert set(waits) == set(FLOORS)
    for name, wait in waits.items():
        assert wait >= FLOORS[name] > 0, name


@pytest.mark.parametrize("interval", [0.0, -5.0, math.nan])
def test_run_forever_waits_at_least_its_floor_whatever_the_interval_says(interval: float) -> None:
    rounds = 0

    async def run_once() -> None:
        nonlocal rounds
        rounds += 1

    async def scenario() -> None:
        stop = asyncio.Event()
        loop = asyncio.create_task(
            run_forever("test", run_once, lambda: interval, stop, logging.getLogger("tests"))
        )
        await asyncio.sleep(0.05)  # a rate is measured over a stretch of time
        stop.set()
        await loop

    asyncio.run(scenario())
    assert 1 <= rounds <= 0.05 / MIN_INTERVAL_SECONDS + 5


def test_a_due_time_nearer_than_the_claims_floor_is_waited_for_to_the_time(
    app: due.App, clock: FakeClock
) -> None:
    """An event loop's timer can end a wait a millisecond early (uvloop rounds it
    to whole milliseconds): the turn then finds the job not yet due, and a wait
    floored at 5 ms would start it 5 ms late. The last few milliseconds before a
    due time are waited for as they are; a time further off keeps the floor."""

    @app.task(name="soon")
    async def soon() -> None: ...

    soon.options(delay=timedelta(milliseconds=3)).enqueue()
    worker = Worker(app, WorkerSettings.build({"default": 4}, poll_interval=0.0))
    queue = worker.producers["default"]
    try:
        assert asyncio.run(queue.run_once()) == 0  # not due yet: its time is read
        assert queue.interval() == pytest.approx(0.003)
        clock.advance(0.0025)  # woken half a millisecond early
        assert queue.interval() == pytest.approx(0.0005)
        clock.advance(0.001)  # past it: a claim that found nothing keeps the floor
        assert queue.interval() >= producer.RECHECK_SECONDS
    finally:
        worker.call.close()
