"""What `due check`, the metrics and a job's page say of limits, on every backend:
a job waiting for a limit says why, its queue's oldest-due alert names the
limit, and each limit's figures are scraped."""

from __future__ import annotations

import pytest

import due
from due.clock import FakeClock
from due.core.records import ClaimRequest, WorkerRegistration
from due.visibility.limits import limit_wait
from due.visibility.metrics import registry_for


@pytest.fixture
def tasks(app: due.App) -> tuple[due.Task, due.Task]:
    app.limit("stripe", rate="2/s")
    app.limit("account-sync", concurrency=1)

    @app.task(name="charge", limits=["stripe"])
    def charge(n: int) -> None: ...

    @app.task(name="sync", limits={"account-sync": lambda account: account})
    def sync(account: str) -> None: ...

    app.sync_limits()
    app.store.worker_register(
        WorkerRegistration("w:1:a", "host", 1, {"default": 4}, app.tasks.names())
    )
    return charge, sync


def claim(app: due.App, task: str) -> list[due.Job]:
    request = ClaimRequest("default", 10, "w:1:a", 600, tasks=[task], limited=True)
    return app.store.job_claim(request)  # type: ignore[return-value]


def test_a_waiting_job_says_what_it_waits_for_in_words(
    app: due.App, tasks: tuple[due.Task, due.Task], clock: FakeClock
) -> None:
    charge, sync = tasks
    charges = [charge.enqueue(n) for n in range(3)]
    syncs = [sync.enqueue("acct-7") for _ in range(2)]
    claim(app, "charge"), claim(app, "sync")
    assert limit_wait(app, app.get(charges[2].id)) == (
        "waiting for limit stripe: 2 starts in the last 1s"
    )
    assert limit_wait(app, app.get(syncs[1].id)) == (
        "waiting for limit account-sync (key acct-7): 1 of 1 running"
    )
    assert limit_wait(app, app.get(charges[0].id)) is None  # running, waits for nothing
    clock.advance("2s")  # the window moved on: room, until a claim lets it go
    assert limit_wait(app, app.get(charges[2].id)) == (
        "waiting for limit stripe: it has room again, and starts at a worker's next claim"
    )
    app.set_limit("account-sync", concurrency=3)  # an operator's numbers are the ones told
    assert "room again" in (limit_wait(app, app.get(syncs[1].id)) or "")


def test_the_oldest_due_alert_names_the_limit_its_job_waits_for(
    app: due.App, tasks: tuple[due.Task, due.Task], clock: FakeClock
) -> None:
    app.queue("default", oldest_due_warning="30s", oldest_due_critical="2m")
    _, sync = tasks
    sync.enqueue("acct-7"), sync.enqueue("acct-7")
    claim(app, "sync")  # one runs for long; the other waits for its key
    clock.advance("40s")
    app.store.worker_touch("w:1:a")
    (alert,) = app.check()
    assert alert.line() == (
        "WARNING queue default: oldest due job waited 40s (warning over 30s), "
        "waiting for limit account-sync (key acct-7)"
    )


def test_each_limits_figures_are_scraped(app: due.App, tasks: tuple[due.Task, due.Task]) -> None:
    charge, sync = tasks
    for n in range(3):
        charge.enqueue(n)
    sync.enqueue("acct-7"), sync.enqueue("acct-7"), sync.enqueue("acct-9")
    claim(app, "charge"), claim(app, "sync")
    registry = registry_for(app)

    def value(name: str, limit: str) -> float | None:
        return registry.get_sample_value(name, {"limit": limit})

    assert value("due_limit_running", "stripe") == 2
    assert value("due_limit_starts_total", "stripe") == 2
    assert value("due_limit_waiting_jobs", "stripe") == 1
    assert value("due_limit_running", "account-sync") == 2  # acct-7 and acct-9
    assert value("due_limit_waiting_jobs", "account-sync") == 1
    assert registry.get_sample_value("due_queue_jobs", {"queue": "default", "state": "due"}) == 2
