"""How an attempt ended, as values: what its handler did (returned, raised,
timed out, stopped at a safe point) and what the attempt comes to (`Attempt`:
the completion to write, or none). The executor makes them; no I/O here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from due.core.records import Completion

if TYPE_CHECKING:
    from due.task import Task


@dataclass(frozen=True, slots=True)
class Attempt:
    completion: Completion | None
    """What to write; None when nothing is: the lease was lost, or the job's own
    transaction already recorded its success."""
    seconds: float
    straggler: asyncio.Future[Any] | None = None
    """A sync handler's thread still running after its timeout."""
    lease_lost: bool = False


@dataclass(frozen=True, slots=True)
class Returned:
    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    error: BaseException
    """Any exception but the worker's own stops: `SystemExit` and
    `KeyboardInterrupt` raised by a handler fail its attempt like the rest."""


@dataclass(frozen=True, slots=True)
class TimedOut:
    straggler: asyncio.Future[Any] | None = None


@dataclass(frozen=True, slots=True)
class Stopped:
    """The handler stopped at a safe point: cancelled, or its lease lost."""

    signal: BaseException


Outcome = Returned | Raised | TimedOut | Stopped


def raised_by(outcome: Outcome, task: Task[Any, Any]) -> BaseException | None:
    """What an attempt's handler raised (a TimeoutError for its timeout)."""
    if isinstance(outcome, Raised):
        return outcome.error
    if isinstance(outcome, TimedOut):
        return TimeoutError(f"timed out after {task.config.timeout:g}s")
    if isinstance(outcome, Stopped):
        return outcome.signal
    return None
