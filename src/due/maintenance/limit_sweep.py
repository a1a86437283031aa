"""The sweep of the keys jobs wait for: the net under every other way of
letting them go.

Jobs waiting for a limit go back among the claimable ones when a job of their
key ends (let go by whoever wrote the end, once it committed), when their
rate's window opens, or when the claim that set them waiting asks for a look
(store/limit_claims.py). A process that died between an end and its letting
go, or a look that found the key held by another transaction, leaves jobs
waiting for a slot that is free: so every worker that claims limited jobs
looks at a page of every waiting key every few seconds, on from where its
last look stopped. Each look reads the running limited jobs once for its
whole page of keys, never once per key.
"""

from __future__ import annotations

from collections.abc import Callable

from due.service import Calls
from due.store import Store

SWEEP_SECONDS = 5.0
"""How often a worker looks at a page of the waiting keys."""


class LimitSweep:
    def __init__(
        self,
        *,
        store: Store,
        call: Calls,
        on_released: Callable[[], None] = lambda: None,
        interval: float = SWEEP_SECONDS,
    ) -> None:
        """`on_released`: jobs were let go (the worker claims again at once)."""
        self._store = store
        self._call = call
        self._on_released = on_released
        self._interval = interval

    def interval(self) -> float:
        return self._interval

    async def run_once(self) -> int:
        released: int = await self._call(self._store.limit_reopen)
        if released:
            self._on_released()
        return released
