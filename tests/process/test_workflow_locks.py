"""Cancels and retries of workflows while real workers acknowledge their steps,
on PostgreSQL: no deadlock (one lock order everywhere: a workflow's steps in id
order, then the workflow's row; store/workflows.py), and every workflow, retried
until it succeeds, ends with counts that agree with its steps.

A deadlock costs PostgreSQL's deadlock_timeout before it is broken, and one of
the two transactions is written again: the work gets done, late. So the test
counts them where PostgreSQL does, in `pg_stat_database.deadlocks` for a
database of its own (no other test's deadlock is counted), read once every
session of the test has ended (a session's counts reach the view at the
latest as it exits).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import due
from tests.apps import workflows_app
from tests.conftest import POSTGRES_BASE_URL
from tests.helpers.waiting import wait_until
from tests.helpers.workers import Workers, app_with_tasks_of

pytestmark = pytest.mark.slow
WORKFLOWS = 20
WIDTH = 12  # steps side by side between each workflow's first and last
SECONDS = 8.0
ACTORS = 4


@pytest.fixture
def database() -> Iterator[tuple[str, str]]:
    """A database of its own: its name and URL; deadlocks detected fast."""
    name = f"due_locks_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
        conn.execute(f"ALTER DATABASE {name} SET deadlock_timeout = '100ms'")
    try:
        yield name, POSTGRES_BASE_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def deadlocks(name: str) -> int:
    """The deadlocks PostgreSQL counted in that database, once none of its
    sessions is left (each reports its counts as it exits)."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
    with psycopg.connect(POSTGRES_BASE_URL, autocommit=True) as conn:
        wait_until(
            lambda: conn.execute(query, (name,)).fetchone() == (0,),
            what="every session of the test's database to end",
        )

        def counted() -> int:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = %s", (name,)
            ).fetchone()
            return int(row[0]) if row else 0

        # The last exits' counts land just after their sessions leave the list:
        # read until two reads a second apart agree.
        seen = [counted()]

        def settled() -> bool:
            seen.append(counted())
            return seen[-1] == seen[-2]

        wait_until(settled, every=1.0, what="the deadlock count to settle")
        return seen[-1]


def enqueue(app: due.App) -> list[int]:
    node = app.tasks.get("node")
    ids = []
    for n in range(WORKFLOWS):
        flow = app.workflow(f"locks-{n}")
        first = flow.add(node.request("first", n, 1), name="first")
        middle = [
            flow.add(node.request(f"m{k}", n, 5 + 3 * k), name=f"m{k}", after=[first])
            for k in range(WIDTH)
        ]
        flow.add(node.request("last", n, 1), name="last", after=middle)
        ids.append(flow.enqueue().id)
    return ids


def test_cancels_and_retries_never_deadlock_with_acknowledgements(
    database: tuple[str, str], tmp_path: Path
) -> None:
    name, url = database
    app = app_with_tasks_of(url, workflows_app.app)
    workers = Workers(url, tmp_path / "ledger.txt", tmp_path)
    acted = {"cancel": 0, "retry": 0}
    try:
        started = [workers.start("-c", "8", app="tests.apps.workflows_app:app") for _ in range(3)]
        for worker in started:
            workers.wait_ready(worker)
        flows = enqueue(app)
        with psycopg.connect(url, autocommit=True) as conn:
            # Statistics, as autovacuum keeps them: a batch statement's plan finds
            # its rows through the primary key, in id order. (On a table never
            # analysed, the generic plan of an acknowledgement may scan the table
            # and lock its rows in the order they lie: the deadlock complete_jobs
            # says it leaves to the server's check, another matter than this one.)
            conn.execute("ANALYZE due_jobs")
        stop = time.monotonic() + SECONDS
        errors: list[BaseException] = []

        def act(seed: int) -> None:
            chooser = random.Random(seed)
            try:
                while time.monotonic() < stop:
                    flow = chooser.choice(flows)
                    if chooser.random() < 0.3:
                        app.cancel_workflow(flow)
                        acted["cancel"] += 1
                    app.retry_workflow(flow)
                    acted["retry"] += 1
            except BaseException as error:  # reported below, not lost in a thread
                errors.append(error)

        threads = [threading.Thread(target=act, args=(seed,)) for seed in range(ACTORS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=SECONDS + 120)
        assert not errors, errors
        assert acted["cancel"] > 20, acted  # the acts and the acknowledgements met
        assert workers.records("end"), "no step ran"
        # Counted once across every retry (invariant 18): each workflow ends,
        # and once retried until its steps have all succeeded, its counts agree.
        for flow in flows:
            status = app.wait_workflow(flow, timeout="60s")
            while status.state != "succeeded":
                app.retry_workflow(flow)
                status = app.wait_workflow(flow, timeout="60s")
            assert (status.steps_ended, status.steps_total) == (WIDTH + 2, WIDTH + 2), status
            assert {step.state.value for step in status.steps.values()} == {"succeeded"}
        assert app.stuck_workflows() == []
    finally:
        workers.stop_all()
        app.close()
    found = deadlocks(name)
    assert found == 0, f"{found} deadlocks in {acted['cancel']} cancels, {acted['retry']} retries"
