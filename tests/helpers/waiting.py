"""The ways tests wait: for a condition, with a deadline that cannot hang CI
(sync or async), or for a window in which something must not happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(AssertionError):
    pass


def wait_until(
    condition: Callable[[], T], timeout: float = 30.0, every: float = 0.02, what: str = "condition"
) -> T:
    """Return the first truthy value of `condition()`; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimedOut(f"waited {timeout}s for {what}")
        time.sleep(every)


async def async_wait_until(
    condition: Callable[[], T], timeout: float = 10.0, every: float = 0.005, what: str = "condition"
) -> T:
    """`wait_until` in async code: the loop (and handler threads) run meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimedOut(f"waited {timeout}s for {what}")
        await asyncio.sleep(every)


def holds_for(
    condition: Callable[[], object], seconds: float, every: float = 0.02, what: str = "condition"
) -> None:
    """Check that `condition()` stays true for `seconds` (something that must not
    happen, given the time to happen if it would)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert condition(), f"{what} stopped holding"
        time.sleep(every)
    assert condition(), f"{what} stopped holding"
