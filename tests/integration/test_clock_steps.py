"""A worker whose wall clock steps (an NTP step, a VM resumed) keeps its pace.

Issue 35, hole 5: the offset to the database's clock was measured once at
start, so after a +1 h step every time due within the hour looked past: the
producer rechecked every 5 ms and the scheduler every 0 s, for ever (on
PostgreSQL an idle worker went from 11 to 3,209 transactions a second). Here a
real worker on a real store has its wall clock stepped an hour while it runs,
and its store calls are counted before and after.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import due
from due.worker.settings import WorkerSettings
from due.worker.worker import Worker
from tests.helpers.clocks import SteppedClock
from tests.helpers.waiting import async_wait_until

WINDOW_SECONDS = 1.0
"""How long the store calls are counted, before the step and after it."""
MOST_CALLS_A_SECOND = 60
"""An idle worker makes about ten (claims at each poll, the scheduler's tick, the
rescue, heartbeats); a job or a schedule that a step makes due adds a few."""
CLOCK_INTERVAL = 0.2
"""The worker's re-measurement of the database's clock, short for the test."""


def counted(store: Any) -> Counter[str]:
    """Count every call of the store's operations (spies: the real calls run)."""
    calls: Counter[str] = Counter()
    for name, _ in inspect.getmembers(type(store), inspect.isfunction):
        if not name.startswith("_"):
            setattr(store, name, _counting(name, getattr(store, name), calls))
    return calls


def _counting(name: str, call: Callable[..., Any], calls: Counter[str]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(call):

        async def counting_async(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return await call(*args, **kwargs)

        return counting_async

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return call(*args, **kwargs)

    return counting


async def calls_in_window(calls: Counter[str]) -> Counter[str]:
    before = Counter(calls)
    await asyncio.sleep(WINDOW_SECONDS)  # a rate is measured over a stretch of time
    return Counter(calls) - before


async def next_rounds(calls: Counter[str]) -> None:
    """Wait for the producer's and the scheduler's next rounds (a wait computed
    before a step ends first: up to the poll interval, 2 s)."""
    due, fire = calls["job_next_due"], calls["schedule_next_fire"]
    await async_wait_until(
        lambda: calls["job_next_due"] > due and calls["schedule_next_fire"] > fire + 1,
        timeout=5,
        what="the loops' next rounds",
    )


@pytest.fixture
def stepped_app(backend_url: str) -> Iterator[tuple[due.App, SteppedClock]]:
    clock = SteppedClock()
    app = due.App(backend_url, clock=clock)
    app.migrate()

    @app.task(name="later")
    async def later() -> None: ...

    # Times due within the hour, by the database's clock: a job and a schedule.
    app.schedule("half_hourly", every="30m", task=later)
    later.options(delay="30m").enqueue()
    yield app, clock
    app.close()


@pytest.mark.parametrize("step", [timedelta(hours=1), timedelta(hours=-1)], ids=["ahead", "back"])
def test_a_step_of_the_wall_clock_keeps_the_pace_and_is_measured_again(
    stepped_app: tuple[due.App, SteppedClock],
    step: timedelta,
    backend: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PostgreSQL's clock does not move: the worker's estimate of it must not
    either. SQLite's clock is the host's: the estimate follows it at the next
    measure. Either way the worker says so, and its loops keep their pace."""
    app, clock = stepped_app
    caplog.set_level(logging.WARNING, logger="due.worker")
    calls = counted(app.store)
    settings = WorkerSettings.build(
        {"default": 4}, lease="10s", grace="1s", clock_interval=CLOCK_INTERVAL
    )
    worker = Worker(app, settings)

    def off_by() -> float:
        """How far the worker's estimate of the database's clock is from it."""
        return abs((worker.database_now() - app.store.now()).total_seconds())

    async def scenario() -> None:
        running = asyncio.create_task(worker.run())
        try:
            await async_wait_until(lambda: calls["schedule_next_fire"] >= 2, what="a tick")
            quiet = await calls_in_window(calls)
            assert sum(quiet.values()) <= MOST_CALLS_A_SECOND * WINDOW_SECONDS, quiet
            clock.step += step
            await next_rounds(calls)  # each loop has woken since, the step in view
            stepped = await calls_in_window(calls)
            assert sum(stepped.values()) <= MOST_CALLS_A_SECOND * WINDOW_SECONDS, stepped
            await async_wait_until(lambda: off_by() < 0.5, timeout=5, what="a new measure")
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, 10)
        # One line, or two when a measure was in flight as the clock stepped (the
        # host read after the step, the database before it: the next measure
        # sees the rest). Together they say how far each clock moved.
        lines = [r.fields for r in caplog.records if getattr(r, "event", "") == "clock.stepped"]  # type: ignore[attr-defined]
        assert 1 <= len(lines) <= 2, lines
        host_moved = sum(line["host_clock_moved"] for line in lines)
        assert host_moved == pytest.approx(step.total_seconds(), abs=0.5), lines
        database_moved = step.total_seconds() if backend == "sqlite" else 0.0
        assert sum(line["database_clock_moved"] for line in lines) == pytest.approx(
            database_moved, abs=0.5
        ), lines

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
