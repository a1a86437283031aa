"""Reading a claim's rows (tuples in CLAIM_COLUMNS order, JSON as text): one
row that cannot be read fails its own job and never the claim of the others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from due.core.jobs import JobState
from due.core.records import CLAIM_COLUMNS, read_claimed

AT = datetime(2030, 1, 1, tzinfo=UTC)


def row(job_id: int, payload: str, **values: Any) -> tuple[Any, ...]:
    fields = {
        "id": job_id,
        "task": "t",
        "queue": "default",
        "priority": 0,
        "payload": payload,
        "attempt": 1,
        "max_attempts": 3,
        "lease_token": 7,
        "lease_expires_at": AT + timedelta(seconds=10),
        "run_at": AT + timedelta(seconds=job_id),
        "created_at": AT,
        "scheduled_for": None,
        "checkpoint": None,
        "parent_id": None,
        "completes": None,
        "pieces_total": 0,
        "workflow_id": None,
        "schedule": None,
        "first_attempt": None,
        **values,
    }
    return tuple(fields[name] for name in CLAIM_COLUMNS)


def test_rows_become_jobs_in_claim_order_with_their_json_decoded() -> None:
    rows = [
        row(2, '{"args": [1, "a"], "kwargs": {"k": true}}', checkpoint='{"done": 5}'),
        row(1, '{"args": [], "kwargs": {}}', priority=5, parent_id=9, pieces_total=2),
    ]
    claimed, unreadable = read_claimed(CLAIM_COLUMNS, rows)
    assert unreadable == []
    first, second = claimed
    assert (first.id, first.priority, first.parent_id, first.has_pieces) == (1, 5, 9, True)
    assert first.settles_a_parent
    assert (second.args, second.kwargs, second.checkpoint) == ((1, "a"), {"k": True}, {"done": 5})
    assert second.lease_token == 7 and second.lease_expires_at == AT + timedelta(seconds=10)


def test_an_unreadable_row_fails_alone() -> None:
    deep = "[" * 100_000 + "]" * 100_000  # too deep for the JSON decoder
    rows = [
        row(1, "not json"),
        row(2, '{"args": {}, "kwargs": {}}', completes=4),  # args not a list
        row(3, '{"args": [], "kwargs": {}}', checkpoint=deep),
        row(4, '{"args": [4], "kwargs": {}}'),
    ]
    claimed, unreadable = read_claimed(CLAIM_COLUMNS, rows)
    assert [job.id for job in claimed] == [4]
    assert [c.job_id for c in unreadable] == [1, 2, 3]
    assert {c.state for c in unreadable} == {JobState.FAILED}
    assert [c.settles for c in unreadable] == [False, True, False]
    assert all(c.lease_token == 7 for c in unreadable)
    assert unreadable[0].error is not None
    assert "could not be read" in unreadable[0].error.error


def test_columns_in_another_order_are_refused() -> None:
    with pytest.raises(RuntimeError, match="a claim returned"):
        read_claimed(tuple(reversed(CLAIM_COLUMNS)), [])


def test_a_payload_is_read_as_json_loads_reads_it_whole() -> None:
    """Decoded by the C scanner directly, but nothing it would take for a prefix:
    text after the value fails the row, white space around it does not."""
    rows = [
        row(1, ' {"args": [1], "kwargs": {}} '),
        row(2, '{"args": [2], "kwargs": {}} {"args": [3]}'),
        row(3, '{"args": [NaN], "kwargs": {}}', checkpoint="[1, 2]\n"),
    ]
    claimed, unreadable = read_claimed(CLAIM_COLUMNS, rows)
    first, third = claimed
    assert (first.id, first.args) == (1, (1,))
    assert third.id == 3 and third.checkpoint == [1, 2]
    assert [c.job_id for c in unreadable] == [2]


def test_headers_beside_the_arguments_are_read_apart_from_them() -> None:
    """A payload's "headers" (due.instrumentation) are not arguments; the
    headers the first attempt kept come as JSON text of their own."""
    rows = [
        row(1, '{"args": [1], "kwargs": {"k": 2}, "headers": {"traceparent": "00-a-b-01"}}'),
        row(2, '{"args": [], "kwargs": {}}', schedule="nightly", first_attempt='{"t": "x"}'),
        row(3, '{"args": [], "kwargs": {}, "headers": ["not", "an", "object"]}'),
    ]
    claimed, unreadable = read_claimed(CLAIM_COLUMNS, rows)
    assert unreadable == []
    first, second, third = claimed
    assert (first.args, first.kwargs) == ((1,), {"k": 2})
    assert first.headers == {"traceparent": "00-a-b-01"} and first.first_attempt is None
    assert (second.headers, second.schedule, second.first_attempt) == (None, "nightly", {"t": "x"})
    assert third.headers is None
