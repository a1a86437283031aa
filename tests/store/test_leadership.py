"""Leadership over the database lease, with a fake clock: terms, renewals, failover."""

from __future__ import annotations

import due
from due.clock import FakeClock
from due.scheduler.leader import DatabaseLeases, Leadership


def test_failover_and_a_stale_leader_standing_down(app: due.App, clock: FakeClock) -> None:
    backend = DatabaseLeases(app.store)
    a = Leadership(backend, "a", clock, ttl=10)
    b = Leadership(backend, "b", clock, ttl=10)
    assert a.ensure() and not b.ensure()
    term = a.token
    clock.advance("4s")
    assert a.ensure() and a.token == term  # renewed within its term
    clock.advance("4s")
    assert a.ensure() and not b.ensure()
    clock.advance("10.5s")  # a stops renewing (killed): its lease expires
    assert not a.is_leader  # and it would not trust it anyway
    assert b.ensure() and b.token == term + 1
    assert b.fence is not None and b.fence.token == term + 1
    assert not a.ensure()  # woken up: another term leads now
    assert a.token is None and a.fence is None
    b.release()
    assert a.ensure() and a.token == term + 2  # released: taken at once
