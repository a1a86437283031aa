"""Limits without waiting, on a real SQLite file and a real PostgreSQL: no
claim waits for a key another transaction holds, a claim that creates keys
deadlocks with no other, jobs waiting for a limit cost the claims of other
jobs nothing, and a job's end lets go the jobs waiting for its slot.

A transaction of the test's own stands for another claim, held open (a
worker frozen in the middle of its claim holds its keys so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import due
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion
from tests.helpers.database import plain_transaction, rows
from tests.helpers.waiting import wait_until


@pytest.fixture
def accounts(app: due.App) -> dict[str, due.Task]:
    app.limit("acct", concurrency=1)

    @app.task(name="sync", limits={"acct": lambda account: account})
    def sync(account: str) -> None: ...

    @app.task(name="free")
    def free(n: int) -> None: ...

    app.sync_limits()
    return {"sync": sync, "free": free}


def claim(app: due.App, limit: int = 10) -> list[int]:
    request = ClaimRequest("default", limit, "w", 30, limited=True)
    return [job.id for job in app.store.job_claim(request)]


def succeed(app: due.App, job_id: int) -> None:
    token = rows(app.url, f"SELECT lease_token FROM due_jobs WHERE id = {job_id}")[0][0]
    assert app.store.job_complete([Completion(job_id, token, JobState.SUCCEEDED)]) == {job_id}


def waiting(app: due.App) -> set[int]:
    return {job for (job,) in rows(app.url, "SELECT id FROM due_jobs WHERE limit_wait IS NOT NULL")}


class InThread:
    """A call run on a thread of its own, so that the test can look while it waits."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._call = call
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as error:  # (reported by the test)
            self.error = error

    def outcome(self, timeout: float = 20.0) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"still waiting after {timeout}s"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def other_transaction(app: due.App) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own on the app's PostgreSQL schema, in a
    transaction until the test ends (rolled back then)."""
    with plain_transaction(app.url) as connection:
        connection.execute("SET lock_timeout = '20s'")
        yield connection
        connection.rollback()


def blocked_by(app: due.App, connection: psycopg.Connection[Any]) -> bool:
    """Whether a session waits for a lock `connection` holds."""
    pid = connection.info.backend_pid
    return bool(
        rows(
            app.url,
            f"SELECT 1 FROM pg_stat_activity WHERE {pid} = ANY(pg_blocking_pids(pid))",
        )
    )


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_claim_passes_over_the_keys_another_claim_holds(
    app: due.App, accounts: dict[str, due.Task], other_transaction: psycopg.Connection[Any]
) -> None:
    """Invariant 19: a claim never waits for a key another transaction holds.
    It leaves that key's jobs as they are (neither leased nor set waiting),
    looks on past them for jobs of other keys, and takes the unlimited jobs."""
    sync, free = accounts["sync"], accounts["free"]
    first = sync.enqueue("held").id
    assert claim(app) == [first]
    behind = sync.enqueue("held").id
    assert claim(app) == [] and waiting(app) == {behind}  # its key is full: it waits
    # More of the held key, ahead of the others (priority): a page of candidates
    # holds nothing but them.
    held = [sync.options(priority=5).enqueue("held").id for _ in range(12)]
    others = [sync.enqueue(f"other-{n}").id for n in range(3)]
    unlimited = [free.enqueue(n).id for n in range(2)]
    # The key's look is due (its slot may have freed): the claim's look skips it too.
    succeed(app, first)
    other_transaction.execute(
        "SELECT 1 FROM due_limit_keys WHERE name = 'acct' AND key = 'held' FOR UPDATE"
    )
    claimed = InThread(lambda: claim(app, 10)).outcome()
    assert sorted(claimed) == sorted(others + unlimited)
    assert waiting(app) & set(held) == set()
    assert {app.get(job).state for job in held} == {JobState.QUEUED}
    other_transaction.rollback()  # the other claim ends: its key's jobs are claimable
    assert claim(app, 10) == [held[0]]


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_claim_that_makes_keys_deadlocks_with_no_other(
    app: due.App, accounts: dict[str, due.Task], other_transaction: psycopg.Connection[Any]
) -> None:
    """Two claims that each made a new key, then locked one the other had
    locked, waited for each other until the server ended one (a deadlock, 1 s
    each; 2 a run of 3,000 jobs on 4 workers). The other transaction here does
    what such a claim did: it has written key 'new' and not committed. A claim
    never holds a key while it writes one: it leases what it can, commits, and
    only then writes its new keys."""
    sync = accounts["sync"]
    done = sync.enqueue("old").id
    assert claim(app) == [done]  # key 'old' is stored now
    succeed(app, done)
    new, old = sync.enqueue("new").id, sync.enqueue("old").id
    other_transaction.execute("INSERT INTO due_limit_keys (name, key) VALUES ('acct', 'new')")
    claiming = InThread(lambda: claim(app, 10))
    wait_until(lambda: blocked_by(app, other_transaction), timeout=20, what="the claim to wait")
    # The other "claim" now locks the key the claim had locked (old code): it
    # must get it, the claim having committed what it leased.
    other_transaction.execute(
        "SELECT 1 FROM due_limit_keys WHERE name = 'acct' AND key = 'old' FOR UPDATE"
    )
    other_transaction.commit()
    assert sorted(claiming.outcome()) == sorted([new, old])


@pytest.fixture
def updates_counted(app: due.App) -> Callable[[], int]:
    """Counts the rows of due_limit_keys updated from now on (a trigger)."""
    if app.url.startswith("sqlite"):
        statements = [
            "CREATE TABLE test_key_updates (n INTEGER)",
            "CREATE TRIGGER test_count_key_updates AFTER UPDATE ON due_limit_keys"
            " BEGIN INSERT INTO test_key_updates VALUES (1); END",
        ]
    else:
        statements = [
            "CREATE TABLE test_key_updates (n integer)",
            "CREATE FUNCTION test_count_key_update() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO test_key_updates VALUES (1); RETURN NEW; END $$",
            "CREATE TRIGGER test_count_key_updates AFTER UPDATE ON due_limit_keys"
            " FOR EACH ROW EXECUTE FUNCTION test_count_key_update()",
        ]
    with plain_transaction(app.url) as connection:
        for statement in statements:
            connection.execute(statement)
    return lambda: int(rows(app.url, "SELECT count(*) FROM test_key_updates")[0][0])


def test_jobs_waiting_for_their_keys_cost_the_claims_of_others_nothing(
    app: due.App, accounts: dict[str, due.Task], updates_counted: Callable[[], int]
) -> None:
    """Many keys with a job running and one waiting each: a claim looked at
    200 of them before it took anything (and counted each one's running jobs
    in a read of every running limited job). Now nothing looks at a waiting key
    until something may have freed it: a claim of other jobs touches none."""
    sync, free = accounts["sync"], accounts["free"]
    keys = 250
    running = [sync.enqueue(f"k{n}").id for n in range(keys)]
    assert len(claim(app, keys)) == keys
    waiting_jobs = [sync.enqueue(f"k{n}").id for n in range(keys)]
    assert claim(app, keys) == []
    assert waiting(app) == set(waiting_jobs)
    for _ in range(2):  # the look the claim that set them waiting asked for (200 keys a claim)
        assert claim(app, 10) == []
    before = updates_counted()
    unlimited = [free.enqueue(n).id for n in range(5)]
    assert sorted(claim(app, 10)) == sorted(unlimited)
    for _ in range(3):
        assert claim(app, 10) == []
    assert updates_counted() == before, "a claim of other jobs looked at waiting keys"
    # A job's end lets go the job waiting for its slot, and only it.
    succeed(app, running[7])
    assert waiting(app) == set(waiting_jobs) - {waiting_jobs[7]}
    assert claim(app, 10) == [waiting_jobs[7]]


def test_a_job_waiting_for_a_slot_that_freed_meanwhile_is_let_go(
    app: due.App, accounts: dict[str, due.Task]
) -> None:
    """The end of a running job may commit after a claim counted it running,
    and before that claim set a job waiting for its slot: the end then let
    nobody go. The claim asks for a look at the key, which the next claim
    makes (here: the end committed before the look, as seen by it)."""
    sync = accounts["sync"]
    first = sync.enqueue("a").id
    assert claim(app) == [first]
    second = sync.enqueue("a").id
    assert claim(app) == []
    # As if the end had committed between the count and the commit of that
    # claim: written by hand, past the letting go of an end.
    token = rows(app.url, f"SELECT lease_token FROM due_jobs WHERE id = {first}")[0][0]
    with plain_transaction(app.url) as connection:
        connection.execute(
            "UPDATE due_jobs SET state = 'succeeded', lease_token = lease_token + 1"
            f" WHERE id = {first} AND lease_token = {token}"
        )
    assert waiting(app) == {second}
    assert claim(app) == [second]


def test_the_sweep_lets_go_what_no_end_did(app: due.App, accounts: dict[str, due.Task]) -> None:
    """A process that died between an end and its letting go: the worker's
    sweep of every waiting key lets the job go."""
    sync = accounts["sync"]
    first = sync.enqueue("a").id
    assert claim(app) == [first]
    second = sync.enqueue("a").id
    assert claim(app) == []
    assert claim(app) == []  # (the look it asked for: no room yet)
    token = rows(app.url, f"SELECT lease_token FROM due_jobs WHERE id = {first}")[0][0]
    with plain_transaction(app.url) as connection:  # an end, and nothing after it
        connection.execute(
            "UPDATE due_jobs SET state = 'succeeded', lease_token = lease_token + 1"
            f" WHERE id = {first} AND lease_token = {token}"
        )
    assert claim(app) == []  # nothing looks at the key: nothing may have freed it
    assert app.store.limit_reopen() == 1
    assert claim(app) == [second]
