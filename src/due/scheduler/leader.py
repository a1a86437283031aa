"""Leadership: one scheduler acts at a time, and stops acting before its lease ends.

The lease is a row (name, holder, token, expires_at) taken and renewed with
single conditional statements: taken when free or expired — a new term, whose
token is one more than the last — and renewed only by its holder, while it
has not expired. The leader renews every `ttl / 3`. It trusts its lease only
until the last successful renewal + `ttl * 0.8` on its own monotonic clock:
if it cannot renew by then (the database is unreachable, the process was
paused), it stops acting at once, before anyone else can take over. A
standby tries to take the lease on every tick, so a dead leader is replaced
within its ttl plus a tick.

Leadership is an optimisation, not the safety: each materialisation checks,
in its own transaction, that its term still holds the lease, and the unique
(schedule, scheduled_for) key makes a second run impossible anyway.

With `lease_url="redis://..."` (extra `due[redis]`) the lease lives in Redis:
`SET key holder:token NX PX ttl` to take it, a compare-and-set script to renew
and release it. The database check then has no lease to look at; the unique
key remains.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Protocol

from due.clock import Clock
from due.core.schedules import LeaseFence
from due.errors import ConfigurationError, StoreError, StoreUnavailableError
from due.logs import event

log = logging.getLogger("due.scheduler")
LEADER_LEASE = "scheduler"
DEFAULT_LEASE_TTL = 10.0
TRUST_FRACTION = 0.8


class LeaseBackend(Protocol):
    """Where the lease lives: the database (default) or Redis."""

    fences_in_database: bool

    def acquire(self, name: str, holder: str, ttl: float) -> int | None: ...

    def renew(self, name: str, holder: str, token: int, ttl: float) -> bool: ...

    def release(self, name: str, holder: str, token: int) -> None: ...


class DatabaseLeases:
    fences_in_database = True

    def __init__(self, store: Any) -> None:
        self.store = store

    def acquire(self, name: str, holder: str, ttl: float) -> int | None:
        token: int | None = self.store.lease_acquire(name, holder, ttl)
        return token

    def renew(self, name: str, holder: str, token: int, ttl: float) -> bool:
        return bool(self.store.lease_renew(name, holder, token, ttl))

    def release(self, name: str, holder: str, token: int) -> None:
        self.store.lease_release(name, holder, token)


_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLeases:
    """Leases in Redis, for teams that already run it (`pip install due[redis]`)."""

    fences_in_database = False

    def __init__(self, url: str, prefix: str = "due:lease:") -> None:
        try:
            import redis
        except ImportError:
            raise ConfigurationError(
                "a Redis lease needs the redis package: pip install 'due[redis]'"
            ) from None
        self._redis = redis.Redis.from_url(
            url, socket_timeout=2.0, socket_connect_timeout=2.0, decode_responses=True
        )
        self._errors = redis.RedisError
        self._prefix = prefix
        self._renew = self._redis.register_script(_RENEW)
        self._release = self._redis.register_script(_RELEASE)

    def acquire(self, name: str, holder: str, ttl: float) -> int | None:
        key = self._prefix + name
        with self._translated():
            current = self._redis.get(key)
            if current is not None and str(current).rpartition(":")[0] == holder:
                token = int(str(current).rpartition(":")[2])
                return token if self.renew(name, holder, token, ttl) else None
            token = int(self._redis.incr(key + ":terms"))
            taken = self._redis.set(key, f"{holder}:{token}", nx=True, px=int(ttl * 1000))
            return token if taken else None

    def renew(self, name: str, holder: str, token: int, ttl: float) -> bool:
        with self._translated():
            keys = [self._prefix + name]
            return bool(self._renew(keys=keys, args=[f"{holder}:{token}", int(ttl * 1000)]))

    def release(self, name: str, holder: str, token: int) -> None:
        with self._translated():
            self._release(keys=[self._prefix + name], args=[f"{holder}:{token}"])

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except self._errors as error:
            raise StoreUnavailableError(f"Redis lease: {error}") from error


class Leadership:
    """Whether this process leads, kept current by `ensure()` on every tick."""

    def __init__(
        self,
        backend: LeaseBackend,
        holder: str,
        clock: Clock,
        ttl: float = DEFAULT_LEASE_TTL,
        name: str = LEADER_LEASE,
    ) -> None:
        self.backend = backend
        self.holder = holder
        self.clock = clock
        self.ttl = ttl
        self.name = name
        self.token: int | None = None
        self._trusted_until = float("-inf")
        self._renew_at = float("-inf")

    @property
    def is_leader(self) -> bool:
        return self.token is not None and self.clock.monotonic() < self._trusted_until

    @property
    def fence(self) -> LeaseFence | None:
        """What the database checks before a leader's write (None for Redis leases)."""
        if self.token is None or not self.backend.fences_in_database:
            return None
        return LeaseFence(self.name, self.holder, self.token)

    def ensure(self) -> bool:
        """Renew the lease when due, or try to take it; True while leading."""
        sent_at = self.clock.monotonic()
        if self.token is not None and sent_at < self._renew_at and self.is_leader:
            return True
        try:
            if self.token is not None and self.backend.renew(
                self.name, self.holder, self.token, self.ttl
            ):
                self._trusted(sent_at)
                return True
            if self.token is not None:
                self._lost("another process holds the lease now")
            token = self.backend.acquire(self.name, self.holder, self.ttl)
        except StoreError as error:
            if self.token is not None and not self.is_leader:
                self._lost(f"could not renew the lease in time: {error}")
            return self.is_leader
        if token is not None:
            self.token = token
            self._trusted(sent_at)
            event(log, "scheduler.leading", holder=self.holder, term=token)
        return self.is_leader

    def _trusted(self, sent_at: float) -> None:
        self._trusted_until = sent_at + self.ttl * TRUST_FRACTION
        self._renew_at = sent_at + self.ttl / 3

    def _lost(self, reason: str) -> None:
        event(
            log,
            "scheduler.not_leading",
            logging.WARNING,
            holder=self.holder,
            term=self.token,
            reason=reason,
        )
        self.token = None
        self._trusted_until = float("-inf")

    def release(self) -> None:
        if self.token is None:
            return
        try:
            self.backend.release(self.name, self.holder, self.token)
        except StoreError as error:
            event(log, "scheduler.release_failed", logging.WARNING, error=str(error))
        self.token = None
        self._trusted_until = float("-inf")
