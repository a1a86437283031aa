"""Limits under faults, in real worker processes: a worker frozen (SIGSTOP) in
the middle of its claim stalls no other worker's claims (PostgreSQL), and a
rate holds as the handlers begin, a claim's reply held back or not.

The frozen worker reaches PostgreSQL through a proxy that stops its process
the moment its claim has locked its keys: it stays there, its transaction
open, until the server ends that transaction (10 s idle).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

import due
from tests.apps import frozen_claim_app, limits_app
from tests.helpers.database import rows
from tests.helpers.proxy import FreezableProxy, freezable_proxy
from tests.helpers.waiting import wait_until
from tests.helpers.workers import WorkerProcess, Workers, app_with_tasks_of

pytestmark = pytest.mark.slow
FROZEN_APP = "tests.apps.frozen_claim_app:frozen"
STEADY_APP = "tests.apps.frozen_claim_app:steady"
LIMITS_APP = "tests.apps.limits_app:app"
KEY_LOCK = (b"due_limit_keys k\nWHERE (k.name, k.key) IN (SELECT * FROM unnest(", b"FOR UPDATE")
"""Markers of the claim's statement that locks its candidates' keys (and of no other)."""


@pytest.fixture
def proxy() -> Iterator[FreezableProxy]:
    with freezable_proxy() as running:
        yield running


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    """Both apps' tasks and their limit, on this test's database."""
    application = app_with_tasks_of(backend_url, frozen_claim_app.steady)
    for task in frozen_claim_app.frozen.tasks:
        application.tasks.add(due.Task(application, task.fn, task.name, task.config))
    application.limit("acct", concurrency=1)
    application.sync_limits()
    yield application
    application.close()


def states(app: due.App, ids: list[int]) -> list[str]:
    found = dict(
        rows(app.url, f"SELECT id, state FROM due_jobs WHERE id IN ({', '.join(map(str, ids))})")
    )
    return [found[job] for job in ids]


def frozen_transaction(app: due.App) -> tuple[Any, Any] | None:
    """(pid, transaction start) of the session frozen after locking its keys."""
    found = rows(
        app.url,
        "SELECT pid, xact_start FROM pg_stat_activity WHERE state = 'idle in transaction'"
        " AND query LIKE '%due_limit_keys k%FOR UPDATE%'",
    )
    return found[0] if found else None


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_worker_frozen_in_its_claim_stalls_no_other_workers_claims(
    app: due.App, workers: Workers, proxy: FreezableProxy, postgres_url: str
) -> None:
    """Invariant 19. The frozen worker holds the lock of key K (its claim
    locked it, then the process stopped). Another worker's claims, in every
    queue, must not wait for it: its unlimited jobs, in the same queue and in
    another, and its jobs of other keys all run while the frozen transaction
    is still open (before, every claim of that worker waited for the key
    until the server ended the frozen transaction, 10 s: pickups of 0.1 s
    took 13.5 s). Only K's own jobs wait."""
    steady = workers.start("-q", "limited=4", "-q", "other=4", app=STEADY_APP)
    workers.wait_ready(steady)
    sync = app.tasks.get("sync_account")
    # K: one running (long), two waiting for it, and that settled (looked at).
    running = sync.enqueue("K", 120).id
    wait_until(lambda: states(app, [running]) == ["running"], timeout=20, what="K's first job")
    waiting = [sync.enqueue("K").id for _ in range(2)]
    settled = (
        "SELECT 1 FROM due_limit_keys WHERE name = 'acct' AND key = 'K'"
        " AND waiting AND opens_at IS NULL"
    )
    wait_until(lambda: rows(app.url, settled), timeout=20, what="K's jobs to wait")

    frozen: list[WorkerProcess] = []
    proxy.after_statement(KEY_LOCK, lambda: frozen[0].signal(signal.SIGSTOP))
    frozen.append(
        workers.start(
            "-q",
            "limited=2",
            app=FROZEN_APP,
            env={"DUE_DATABASE_URL": proxy.url_through(postgres_url)},
        )
    )
    workers.wait_ready(frozen[0])
    app.tasks.get("frozen_sync").enqueue("K")  # its claim locks K, and stops there
    wait_until(lambda: frozen_transaction(app), timeout=20, what="the claim to freeze")
    held = frozen_transaction(app)

    quick = [app.tasks.get("quick").enqueue(n).id for n in range(3)]
    elsewhere = [app.tasks.get("elsewhere").enqueue(n).id for n in range(3)]
    other_keys = [sync.enqueue(f"other-{n}").id for n in range(3)]
    ran = quick + elsewhere + other_keys
    wait_until(
        lambda: set(states(app, ran)) == {"succeeded"}, timeout=60, what="the other jobs to run"
    )
    assert frozen_transaction(app) == held, "they ran only once the frozen claim was ended"
    assert states(app, waiting) == ["queued", "queued"]
    frozen[0].signal(signal.SIGCONT)


# --- a rate, as the handlers begin ------------------------------------------------------


@pytest.fixture
def rated_app(backend_url: str) -> Iterator[due.App]:
    application = app_with_tasks_of(backend_url, limits_app.app)
    for limit in limits_app.app.limits:
        application.limits.declare(limit.name, rate=limit.rate_text, concurrency=limit.concurrency)
    application.sync_limits()
    yield application
    application.close()


def handler_starts(workers: Workers) -> list[float]:
    """When each handler of the rated task began, on its own clock."""
    return [float(fields[4]) for fields in workers.records("start") if fields[5] == "rated"]


def most_in_a_second(instants: list[float]) -> int:
    ordered = sorted(instants)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def run_rated(app: due.App, workers: Workers, count: int) -> list[int]:
    call = app.tasks.get("call_rated")
    jobs = [job.id for job in app.enqueue_many([call.request() for _ in range(count)])]
    wait_until(
        lambda: set(states(app, jobs)) == {"succeeded"}, timeout=90, what="every call to succeed"
    )
    return jobs


def test_a_rate_holds_as_the_handlers_begin(rated_app: due.App, workers: Workers) -> None:
    """5/s: the service the handlers call sees at most 5 begin in any second
    (a start counted at the claim began later, by a batch's wait or a reply's
    way: the handlers' own clock saw 7-8 in a second)."""
    for worker in [workers.start("-c", "4", app=LIMITS_APP) for _ in range(3)]:
        workers.wait_ready(worker)
    jobs = run_rated(rated_app, workers, 40)
    starts = handler_starts(workers)
    assert len(starts) >= len(jobs)
    assert most_in_a_second(starts) <= 5, sorted(starts)
    assert {attempt for (attempt,) in rows(rated_app.url, "SELECT attempt FROM due_jobs")} == {1}


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_rate_holds_when_a_claims_reply_is_held_back(
    rated_app: due.App, workers: Workers, proxy: FreezableProxy, postgres_url: str
) -> None:
    """One worker's claim reply comes 3 s late: its jobs, counted at the claim,
    would begin in a window others filled since (10 in a second). They are
    handed back unstarted instead, their attempt not spent, and run later."""
    direct = [workers.start("-c", "4", app=LIMITS_APP) for _ in range(2)]
    slow = workers.start(
        "-c",
        "4",
        "--log-level",
        "debug",
        app=LIMITS_APP,
        env={"DUE_DATABASE_URL": proxy.url_through(postgres_url)},
    )
    for worker in [*direct, slow]:
        workers.wait_ready(worker)
    proxy.hold_next_claim(3.0)
    jobs = run_rated(rated_app, workers, 40)
    assert proxy.claims_held == 1
    assert most_in_a_second(handler_starts(workers)) <= 5, sorted(handler_starts(workers))
    assert {attempt for (attempt,) in rows(rated_app.url, "SELECT attempt FROM due_jobs")} == {1}
    assert "job.start_too_late" in slow.log()
    assert len(jobs) == 40
