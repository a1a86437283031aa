"""Store calls from the event loop: each runs in a thread of a small pool.

The store is synchronous (one implementation per backend, shared with the
API); the worker's loop hands each call to a thread so it never blocks. The
heartbeat gets a pool of its own so a slow claim can never delay a renewal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class StoreCalls:
    def __init__(self, threads: int, name: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name)

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
