"""Store calls from the event loop: each runs in a thread of a small pool.

The store is synchronous (one implementation per backend, shared with the
API); the worker's loop hands each call to a thread so it never blocks. The
heartbeat gets a pool of its own so a slow claim can never delay a renewal.
(On PostgreSQL the claims and acknowledgements go from the loop itself, on
the store's loop lane, and come here only when the lane fails them.)

A call may be given a deadline. A call past it is abandoned: the caller gets
`StoreUnavailableError` at once, and the pool is replaced by a fresh one, so
the next call does not queue behind a thread stuck on a frozen connection
(that thread ends when the connection's TCP timeouts fail its read).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from due.errors import StoreUnavailableError

T = TypeVar("T")


class StoreCalls:
    def __init__(self, threads: int, name: str) -> None:
        self._threads = threads
        self._name = name
        self._pool = self._new_pool()

    def _new_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        return concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    async def within(self, deadline: float, fn: Callable[..., T], *args: Any) -> T:
        """The call, or StoreUnavailableError once `deadline` seconds have passed."""
        loop = asyncio.get_running_loop()
        pool = self._pool
        future = loop.run_in_executor(pool, functools.partial(fn, *args))
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=max(deadline, 0.0))
        except TimeoutError:
            if self._pool is pool:  # its thread is stuck: later calls get fresh threads
                self._pool = self._new_pool()
                pool.shutdown(wait=False)
            future.add_done_callback(_consume)
            raise StoreUnavailableError(
                f"the database did not answer {getattr(fn, '__name__', 'a call')} within "
                f"{deadline:.1f}s (a frozen connection?); the call was abandoned"
            ) from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _consume(future: asyncio.Future[Any]) -> None:
    """An abandoned call's late end, success or error, is dropped."""
    if not future.cancelled():
        future.exception()
