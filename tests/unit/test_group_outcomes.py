"""The rules a group of one-job enqueues settles its callers by, shared by the
coroutines' groups and the threads' (store/group_outcomes.py)."""

from __future__ import annotations

import threading
import traceback

import psycopg

from due.core.jobs import Job
from due.errors import StoreError, StoreUnavailableError
from due.store.backend import StatementRefused
from due.store.group_outcomes import group_outcomes


def test_a_refused_group_is_made_request_by_request() -> None:
    refused = StatementRefused("a row broke a constraint")
    assert group_outcomes(3, None, refused) == [None, None, None]
    assert group_outcomes(1, None, refused) == [refused]  # alone: the refusal is its own


def test_each_caller_has_the_write_s_own_outcome() -> None:
    job: Job = object()  # type: ignore[assignment]  # only passed through
    skipped = StatementRefused("a trigger skipped the row")
    assert group_outcomes(2, [job, skipped]) == [job, skipped]
    assert group_outcomes(2, None) == [None, None]  # the write could not be made


def test_another_error_reaches_every_caller_each_as_its_own_object() -> None:
    try:
        try:
            raise ConnectionResetError("the socket closed")
        except ConnectionResetError as cause:
            raise StoreUnavailableError("the database went away") from cause
    except StoreUnavailableError as error:
        failed = error
    outcomes = group_outcomes(3, None, failed)
    assert outcomes[0] is failed
    assert len({id(outcome) for outcome in outcomes}) == 3
    for outcome in outcomes:
        assert type(outcome) is StoreUnavailableError and str(outcome) == str(failed)
        assert outcome.__cause__ is failed.__cause__

    seen: list[str] = []

    def raise_it(error: BaseException) -> None:
        try:
            raise error
        except StoreUnavailableError as raised:
            seen.append("".join(traceback.format_tb(raised.__traceback__)))

    threads = [threading.Thread(target=raise_it, args=(o,)) for o in outcomes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Each traceback is the writer's frames and one raise of its own caller.
    assert all(text.count("raise error") == 1 for text in seen), seen


def test_a_copy_keeps_its_own_notes() -> None:
    failed = StoreUnavailableError("the database went away")
    failed.add_note("while writing a group of 2")
    first, second = group_outcomes(2, None, failed)
    second.add_note("seen by the second caller")  # type: ignore[union-attr]
    assert first.__notes__ == ["while writing a group of 2"]  # type: ignore[union-attr]


class _NeedsTwo(StoreError):
    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")


def test_an_error_that_cannot_be_copied_is_shared() -> None:
    odd = _NeedsTwo("write", "refused by a driver")
    assert group_outcomes(2, None, odd) == [odd, odd]


def test_a_drivers_error_is_shared_and_left_as_it_was() -> None:
    """psycopg's __reduce__ writes into the original's __dict__: a copy would
    take the connection and result off the error its first caller gets."""
    driver = psycopg.errors.UniqueViolation("duplicate key")
    before = dict(driver.__dict__)
    assert group_outcomes(2, None, driver) == [driver, driver]
    assert driver.__dict__ == before
