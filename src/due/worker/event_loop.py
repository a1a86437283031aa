"""Which event loop a worker process runs on: uvloop when it is installed.

A worker's loop does the bookkeeping of every job (a task per job, the
callbacks of the claims and acknowledgements), and on PostgreSQL it sends the
claims and acknowledgements itself. uvloop (libuv, written in Cython) does
that bookkeeping in C: the worker's CPU per no-op job fell by 7 % on
PostgreSQL (instructions counted under callgrind, 4,000 jobs). So a worker
uses it when it can be imported (`pip install "due[uvloop]"`); `asyncio`
forces the standard loop, `uvloop` requires uvloop (and says how to install
it when it is missing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from due.errors import ConfigurationError

LOOPS = ("auto", "asyncio", "uvloop")
DEFAULT_LOOP = "auto"

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: str) -> LoopFactory | None:
    """The factory of the loop `choice` names (None: asyncio's default loop)."""
    if choice not in LOOPS:
        raise ConfigurationError(f"event loop {choice!r}: choose one of {', '.join(LOOPS)}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigurationError(
                "the uvloop event loop is not installed: pip install 'due[uvloop]' "
                "(or run with --loop asyncio)"
            ) from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` or `asyncio`, for the worker's start line."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
