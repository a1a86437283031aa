"""What the store says of limits, on both backends: each limit's figures, one
key's, a job's limits and what it waits for, and a queue's due jobs and its
oldest one counting the jobs that wait for a limit."""

from __future__ import annotations

from datetime import timedelta

import pytest

import due
from due.clock import FakeClock
from due.core.limits import WHOLE, Limit
from due.core.records import ClaimRequest


@pytest.fixture
def tasks(app: due.App) -> tuple[due.Task, due.Task, due.Task]:
    app.limit("stripe", rate="2/s")
    app.limit("account-sync", concurrency=1)

    @app.task(name="charge", queue="payments", limits=["stripe"])
    def charge(n: int) -> None: ...

    @app.task(name="sync", queue="payments", limits={"account-sync": lambda account: account})
    def sync(account: str) -> None: ...

    @app.task(name="plain", queue="payments")
    def plain(n: int) -> None: ...

    app.sync_limits()
    return charge, sync, plain


def claim(app: due.App, queue: str = "payments", limit: int = 10) -> list[due.Job]:
    return app.store.job_claim(ClaimRequest(queue, limit, "w", 30, limited=True))  # type: ignore[return-value]


def test_a_job_says_its_limits_and_what_it_waits_for(
    app: due.App, tasks: tuple[due.Task, due.Task, due.Task]
) -> None:
    charge, sync, plain = tasks
    charges = [charge.enqueue(n) for n in range(3)]
    syncs = [sync.enqueue("acct-7") for _ in range(2)]
    assert app.get(charges[0].id).limits == (("stripe", None),)
    assert app.get(syncs[0].id).limits == (("account-sync", "acct-7"),)
    assert app.get(plain.enqueue(1).id).limits == ()
    assert len(claim(app)) == 4  # two charges (the rate), one sync (its key), the plain job
    waiting = app.get(charges[2].id)
    assert (waiting.state, waiting.limit_wait, waiting.limit_wait_key) == (
        due.JobState.QUEUED,
        "stripe",
        None,
    )
    waiting = app.get(syncs[1].id)
    assert (waiting.limit_wait, waiting.limit_wait_key) == ("account-sync", "acct-7")
    assert app.get(charges[0].id).limit_wait is None


def test_the_figures_of_each_limit_and_of_one_key(
    app: due.App, tasks: tuple[due.Task, due.Task, due.Task]
) -> None:
    charge, sync, _ = tasks
    for n in range(3):
        charge.enqueue(n)
    sync.enqueue("acct-7"), sync.enqueue("acct-7"), sync.enqueue("acct-9")
    claim(app)
    by_name = {overview.name: overview for overview in app.store.limit_overview()}
    stripe, accounts = by_name["stripe"], by_name["account-sync"]
    assert (stripe.running, stripe.waiting, stripe.started_in_window) == (2, 1, 2)
    assert (stripe.started_total, stripe.overridden) == (2, False)
    assert (accounts.running, accounts.waiting, accounts.keys) == (2, 1, 2)
    assert [(k.key, k.running, k.waiting) for k in accounts.busiest] == [
        ("acct-7", 1, 1),
        ("acct-9", 1, 0),
    ]
    numbers, key = app.store.limit_key("account-sync", "acct-7")  # type: ignore[misc]
    assert numbers == Limit("account-sync", 1) and (key.running, key.waiting) == (1, 1)
    numbers, key = app.store.limit_key("stripe", WHOLE)  # type: ignore[misc]
    assert numbers == Limit("stripe", None, 2, 1.0)
    assert (key.running, key.waiting, key.started_in_window, key.started_total) == (2, 1, 2, 2)
    assert app.store.limit_key("stripe", "no-such-key") is None
    assert app.store.limit_key("no-such-limit", WHOLE) is None


def test_an_operators_numbers_show_until_reset_and_a_sync_keeps_them(
    app: due.App, tasks: tuple[due.Task, due.Task, due.Task]
) -> None:
    assert app.store.limit_set(Limit("stripe", 3, 50, 60.0))
    assert not app.store.limit_set(Limit("no-such-limit", 3))
    app.store.limit_sync(list(app.limits))  # a worker starting: the operator's stay
    (stripe,) = [o for o in app.store.limit_overview() if o.name == "stripe"]
    assert stripe.overridden and stripe.limit == Limit("stripe", 3, 50, 60.0)
    assert stripe.code == Limit("stripe", None, 2, 1.0)
    assert app.store.limit_reset("stripe") and not app.store.limit_reset("no-such-limit")
    (stripe,) = [o for o in app.store.limit_overview() if o.name == "stripe"]
    assert not stripe.overridden and stripe.limit == stripe.code


def test_jobs_waiting_for_a_limit_are_due_and_their_age_counts(
    app: due.App, tasks: tuple[due.Task, due.Task, due.Task], clock: FakeClock
) -> None:
    charge, _, plain = tasks
    first = charge.enqueue(0)
    (queue,) = app.queues()  # a queue of limited jobs only is listed, its jobs due
    assert (queue.name, queue.due, queue.queued, queue.oldest_due_at) == (
        "payments",
        1,
        1,
        first.run_at,
    )
    assert queue.oldest_due_limit is None  # due, but it waits for nothing yet
    clock.advance("1s")
    for n in range(1, 3):
        charge.enqueue(n)
    clock.advance("1s")
    plain.enqueue(0)
    charges = ClaimRequest("payments", 10, "w", 30, tasks=["charge"], limited=True)
    assert len(app.store.job_claim(charges)) == 2  # the two oldest; the third waits
    clock.advance("1m")
    (queue,) = app.queues()
    assert (queue.due, queue.running) == (2, 2)  # the waiting charge and the plain job
    assert queue.oldest_due_at == first.run_at + timedelta(seconds=1)
    assert (queue.oldest_due_limit, queue.oldest_due_limit_key) == ("stripe", None)


def test_the_oldest_due_job_names_its_limit_only_when_it_is_the_oldest(
    app: due.App, tasks: tuple[due.Task, due.Task, due.Task], clock: FakeClock
) -> None:
    _, sync, plain = tasks
    older = plain.enqueue(0)
    clock.advance("1s")
    sync.enqueue("acct-7"), sync.enqueue("acct-7")
    app.store.job_claim(ClaimRequest("payments", 1, "w", 30, tasks=["sync"], limited=True))
    app.store.job_claim(ClaimRequest("payments", 1, "w", 30, tasks=["sync"], limited=True))
    (queue,) = app.queues()
    assert (queue.due, queue.oldest_due_at, queue.oldest_due_limit) == (2, older.run_at, None)
    app.cancel(older.id)
    (queue,) = app.queues()
    assert (queue.oldest_due_limit, queue.oldest_due_limit_key) == ("account-sync", "acct-7")
