"""The optional Redis leader lease, against a real Redis (make test starts it)."""

from __future__ import annotations

import time
import uuid

import pytest

from due.clock import FakeClock
from due.scheduler.leader import Leadership, RedisLeases

REDIS_URL = "redis://127.0.0.1:6379/15"


@pytest.fixture
def leases() -> RedisLeases:
    return RedisLeases(REDIS_URL, prefix=f"due-test:{uuid.uuid4().hex}:")


def test_one_holder_at_a_time_with_growing_terms(leases: RedisLeases) -> None:
    first = leases.acquire("scheduler", "a", 5)
    assert first is not None and leases.acquire("scheduler", "b", 5) is None
    assert leases.acquire("scheduler", "a", 5) == first  # its own: renewed, same term
    assert not leases.renew("scheduler", "b", first, 5)
    # Renewed for half a second only now: the calls before it had 5 s, not half
    # a second from the first (a loaded machine can stall a process that long).
    assert leases.renew("scheduler", "a", first, 0.5)
    time.sleep(0.7)  # a real expiry in Redis (no injectable clock there)
    second = leases.acquire("scheduler", "b", 5)
    assert second is not None and second > first
    assert not leases.renew("scheduler", "a", first, 5)
    leases.release("scheduler", "a", first)  # not its lease: changes nothing
    assert leases.acquire("scheduler", "c", 5) is None
    leases.release("scheduler", "b", second)
    assert leases.acquire("scheduler", "c", 5) is not None


def test_leadership_over_redis_has_no_database_fence(leases: RedisLeases) -> None:
    clock = FakeClock()
    leading = Leadership(leases, "me", clock, ttl=5)
    assert leading.ensure() and leading.is_leader
    assert leading.fence is None  # the unique key alone guards the runs
    clock.advance("4.5s")  # past the trust window (5s x 0.8) without a renewal
    assert not leading.is_leader
    leading.release()
    assert Leadership(leases, "other", clock, ttl=5).ensure()
