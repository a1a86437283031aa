"""Leadership over the database lease, with a fake clock: terms, renewals, failover."""

from __future__ import annotations

import threading
import time
from typing import Any

import due
from due.clock import FakeClock
from due.core.schedules import Plan
from due.errors import StoreUnavailableError
from due.scheduler.leader import DatabaseLeases, Leadership
from due.scheduler.service import decide


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


def test_a_leader_paused_inside_its_transaction_does_not_block_failover(
    postgres_url: str, clock: FakeClock
) -> None:
    """A leader's transaction holds the lease row; paused inside it (here: its
    decision takes seconds), the server ends it, and the lease, once expired, is
    taken over without waiting for the paused leader to wake up."""
    app = due.App(postgres_url, clock=clock)
    app.migrate()

    @app.task(name="tick")
    def tick() -> None: ...

    app.schedule("every-second", every="1s", task=tick)
    app.sync_schedules()
    backend = DatabaseLeases(app.store)
    a = Leadership(backend, "a", clock, ttl=10)
    b = Leadership(backend, "b", clock, ttl=10)
    assert a.ensure()
    clock.advance("2s")
    inside, wake_up, outcome = threading.Event(), threading.Event(), []

    def paused_decision(*args: Any) -> Plan:
        inside.set()
        wake_up.wait(10)  # the leader is paused in the middle of its transaction
        return decide(*args)  # and wakes up sure it leads: its plan starts runs

    def lead() -> None:
        try:
            app.store.schedule_materialize("every-second", paused_decision, a.fence)
        except BaseException as error:
            outcome.append(error)

    leader = threading.Thread(target=lead)
    leader.start()
    try:
        assert inside.wait(10)
        clock.advance("11s")  # its lease has expired meanwhile
        started = time.monotonic()
        assert b.ensure()
        assert time.monotonic() - started < 3.5  # not held until the leader wakes up
        wake_up.set()
        leader.join(10)
        assert not leader.is_alive()
        assert app.schedule_runs("every-second") == [] and app.jobs() == []  # it wrote nothing
        assert len(outcome) == 1 and isinstance(outcome[0], StoreUnavailableError)  # ended
    finally:
        wake_up.set()
        leader.join(10)
        app.close()
