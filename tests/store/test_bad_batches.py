"""A row the database refuses never holds the rest of its batch hostage (both stores).

Bad values are refused where they are produced (tests/integration/
test_bad_values.py); these rows are made by hand to reach the store anyway,
as a value that slipped past a check would.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest

import due
from due.core.jobs import AttemptError, JobState
from due.core.records import ClaimRequest, Completion, Lease
from due.errors import StoreError
from due.store import batches
from due.store.postgres.backend import translate_errors as postgres_errors
from due.store.sqlite.backend import translate_errors as sqlite_errors
from tests.conftest import POSTGRES_BASE_URL


def test_a_refused_row_is_written_alone_and_stripped(app: due.App) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    for n in range(3):
        t.enqueue(n)
    good, bad, other = app.store.job_claim(ClaimRequest("default", 3, "w", 60.0))
    poison = AttemptError(
        attempt=float("nan"),  # type: ignore[arg-type]  # NaN: not JSON, refused by both
        error="boom",
        traceback=None,
        at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
    )
    applied = app.store.job_complete(
        [
            Completion(good.id, good.lease_token, JobState.SUCCEEDED, result='"ok"'),
            Completion(bad.id, bad.lease_token, JobState.FAILED, error=poison),
            Completion(other.id, other.lease_token, JobState.SUCCEEDED, result='"fine"'),
        ]
    )
    assert applied == {good.id, bad.id, other.id}
    assert app.get(good.id).result == "ok" and app.get(other.id).result == "fine"
    refused = app.get(bad.id)
    assert refused.state == JobState.FAILED
    assert "the database refused this attempt's details" in (refused.last_error or "")


def test_a_refused_progress_does_not_cost_other_jobs_their_leases(app: due.App) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    for n in range(3):
        t.enqueue(n)
    first, second, third = app.store.job_claim(ClaimRequest("default", 3, "w", 60.0))
    reply = app.store.job_heartbeat(
        [
            Lease(first.id, first.lease_token, 60.0, '{"done": 1}'),
            Lease(second.id, second.lease_token, 60.0, '{"done": NaN}'),
            Lease(third.id, third.lease_token, 60.0),
        ]
    )
    assert reply.extended == {first.id, second.id, third.id} and not reply.lost
    assert app.get(first.id).progress == {"done": 1}


SURROGATE = b"caf\xe9".decode("utf-8", "surrogateescape")
"""No driver can encode a lone surrogate: the driver itself raises, before the
database sees the statement (issue 35, hole 1)."""


def test_a_row_the_driver_cannot_encode_is_written_alone_and_stripped(app: due.App) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    for n in range(3):
        t.enqueue(n)
    good, bad, other = app.store.job_claim(ClaimRequest("default", 3, "w", 60.0))
    applied = app.store.job_complete(
        [
            Completion(good.id, good.lease_token, JobState.SUCCEEDED, result='"ok"'),
            Completion(bad.id, bad.lease_token, JobState.SUCCEEDED, result=f'"{SURROGATE}"'),
            Completion(other.id, other.lease_token, JobState.SUCCEEDED, result='"fine"'),
        ]
    )
    assert applied == {good.id, bad.id, other.id}
    assert app.get(good.id).result == "ok" and app.get(other.id).result == "fine"
    refused = app.get(bad.id)
    assert refused.state == JobState.SUCCEEDED
    assert "the database refused this attempt's details" in refused.result["unstorable_result"]


def test_acknowledgements_riding_on_a_claim_survive_a_row_the_driver_cannot_encode(
    app: due.App,
) -> None:
    """On SQLite the worker's outcomes ride along with its claims: one such row
    used to stop every later claim as well."""

    @app.task(name="t")
    def t(n: int) -> None: ...

    for n in range(4):
        t.enqueue(n)
    bad, good = app.store.job_claim(ClaimRequest("default", 2, "w", 60.0))
    at = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    surrogate_error = AttemptError(attempt=1, error=SURROGATE, traceback=None, at=at)
    applied, claimed = app.store.job_complete_and_claim(
        [
            Completion(bad.id, bad.lease_token, JobState.FAILED, error=surrogate_error),
            Completion(good.id, good.lease_token, JobState.SUCCEEDED, result='"ok"'),
        ],
        ClaimRequest("default", 2, "w", 60.0),
    )
    assert applied == {bad.id, good.id}
    assert len(claimed) == 2 and good.id not in {job.id for job in claimed}  # claims go on
    assert app.get(good.id).result == "ok"
    refused = app.get(bad.id)
    assert refused.state == JobState.FAILED
    assert "the database refused this attempt's details" in (refused.last_error or "")


def test_a_progress_the_driver_cannot_encode_costs_no_lease(app: due.App) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    for n in range(2):
        t.enqueue(n)
    first, second = app.store.job_claim(ClaimRequest("default", 2, "w", 60.0))
    reply = app.store.job_heartbeat(
        [
            Lease(first.id, first.lease_token, 60.0, f'{{"message": "{SURROGATE}"}}'),
            Lease(second.id, second.lease_token, 60.0, '{"done": 2}'),
        ]
    )
    assert reply.extended == {first.id, second.id} and not reply.lost
    assert app.get(second.id).progress == {"done": 2}


def test_from_the_loop_a_row_the_driver_cannot_encode_is_written_alone(app: due.App) -> None:
    """The worker's acknowledgement from its event loop (PostgreSQL) hands a batch
    the driver refuses to the thread path, where the row is written alone."""
    lane = app.store.loop_lane(1)
    if lane is None:
        return  # SQLite: no loop lane; the thread path is tested above

    @app.task(name="t")
    def t(n: int) -> None: ...

    for n in range(2):
        t.enqueue(n)
    bad, good = app.store.job_claim(ClaimRequest("default", 2, "w", 60.0))
    ends = [
        Completion(bad.id, bad.lease_token, JobState.SUCCEEDED, result=f'"{SURROGATE}"'),
        Completion(good.id, good.lease_token, JobState.SUCCEEDED, result='"ok"'),
    ]

    async def acknowledge() -> set[int] | None:
        await lane.open()
        try:
            return await app.store.job_complete_on_loop(lane, ends)
        finally:
            await lane.close()

    with pytest.raises(StoreError) as refused:
        asyncio.run(acknowledge())
    assert batches.row_fault(refused.value)
    assert app.store.job_complete(ends) == {bad.id, good.id}
    assert app.get(good.id).result == "ok"


def _failing_write(error: StoreError) -> tuple[list[int], object]:
    calls: list[int] = []

    def write(completions: Sequence[Completion]) -> set[int]:
        calls.append(len(completions))
        raise error

    return calls, write


ENDS = [Completion(n, 1, JobState.SUCCEEDED, result='"a result worth keeping"') for n in (1, 2)]


def test_a_full_disk_is_no_rows_fault_and_strips_nothing(tmp_path: Path) -> None:
    """SQLite's "database or disk is full" used to count as the rows' fault: each
    row was written again stripped of its result. The batch is kept whole
    instead, for the caller to try again."""
    path = str(tmp_path / "full.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (v BLOB)")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError, match="full") as full, sqlite_errors(path):
        conn.execute("INSERT INTO t VALUES (zeroblob(100000))")
    assert not batches.row_fault(full.value)
    calls, write = _failing_write(full.value)
    with pytest.raises(StoreError, match="full"):
        batches.complete_each(write, ENDS)  # type: ignore[arg-type]
    assert calls == [2], "the batch was split and stripped for the database's fault"


def test_a_statement_timeout_is_no_rows_fault_and_a_bad_value_is() -> None:
    with psycopg.connect(POSTGRES_BASE_URL) as conn:
        conn.execute("SET statement_timeout = '10ms'")
        with pytest.raises(StoreError) as timeout, postgres_errors(POSTGRES_BASE_URL):
            conn.execute("SELECT pg_sleep(1)")
        conn.rollback()
        with pytest.raises(StoreError) as bad_value, postgres_errors(POSTGRES_BASE_URL):
            conn.execute("SELECT 'not a number'::int")
    assert not batches.row_fault(timeout.value)
    assert batches.row_fault(bad_value.value)
