"""Transactions PostgreSQL rolls back for a concurrent one: reported as safe to
retry, and retried by the store methods that can be."""

from __future__ import annotations

import threading

import psycopg
import pytest

import due
from due.store.conflicts import retried_on_conflict
from due.store.postgres.backend import translate_errors


@pytest.mark.parametrize(
    ("callers", "says"),
    [(False, "trying again is safe"), (True, "roll your transaction back and run it again")],
)
def test_a_real_deadlock_is_a_conflict_safe_to_retry(
    postgres_url: str, callers: bool, says: str
) -> None:
    """In due's own transaction (rolled back) or on a connection of the caller's
    (whose transaction is theirs to roll back and run again)."""
    with psycopg.connect(postgres_url, autocommit=True) as setup:
        setup.execute("DROP TABLE IF EXISTS pair")
        setup.execute("CREATE TABLE pair (id int PRIMARY KEY)")
        setup.execute("INSERT INTO pair VALUES (1), (2)")
    first_locked, second_locked = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def lock(mine: int, theirs: int, locked: threading.Event, other: threading.Event) -> None:
        try:
            with (
                translate_errors(postgres_url, callers=callers),
                psycopg.connect(postgres_url) as conn,
            ):
                conn.execute("SET deadlock_timeout = '100ms'")
                conn.execute(f"SELECT 1 FROM pair WHERE id = {mine} FOR UPDATE")
                locked.set()
                other.wait(10)
                conn.execute(f"SELECT 1 FROM pair WHERE id = {theirs} FOR UPDATE")
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=lock, args=(1, 2, first_locked, second_locked)),
        threading.Thread(target=lock, args=(2, 1, second_locked, first_locked)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    (error,) = errors  # one of the two was chosen as the victim
    assert isinstance(error, due.StoreConflictError)
    assert "40P01" in str(error) and says in str(error)


def test_a_conflict_is_retried_then_reported() -> None:
    calls: list[int] = []

    @retried_on_conflict
    def flaky(fail_times: int) -> str:
        calls.append(1)
        if len(calls) <= fail_times:
            raise due.StoreConflictError("deadlock detected")
        return "done"

    assert flaky(2) == "done" and len(calls) == 3
    calls.clear()
    with pytest.raises(due.StoreConflictError):
        flaky(99)
    assert len(calls) == 5
