"""The one way tests wait: for a condition, with a deadline that cannot hang CI."""

from __future__ import annotations

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
