"""An acknowledgement's batch read and written a column at a time: each batch
helper answers as its row-by-row counterpart does, for every kind of value."""

from __future__ import annotations

import math
from typing import Any

import pytest

from due.core.stats import DURATION_BUCKETS, bucket_of, buckets_of
from due.store.backend import Columns
from due.store.pieces import any_concerns_a_parent, concerns_a_parent

DURATIONS: list[float | None] = [
    None,
    math.nan,
    math.inf,
    -math.inf,
    -1.0,
    -0.0,
    0.0,
    1e-9,
    *DURATION_BUCKETS,  # on a bound: bisect_left puts it in the bucket it closes
    *(bound * 1.0000001 for bound in DURATION_BUCKETS),
    1e12,
]


def test_buckets_of_many_durations_are_each_ones_bucket() -> None:
    assert buckets_of(DURATIONS) == [bucket_of(seconds) for seconds in DURATIONS]
    assert buckets_of([]) == []


ROW = {"state": "succeeded", "parent_id": None, "completes": None, "pieces_total": 0}


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"state": "waiting"},
        {"parent_id": 7},
        {"completes": 3},
        {"pieces_total": 2},
        {"state": "failed", "pieces_total": 0},
    ],
)
def test_a_batch_concerns_a_parent_when_any_of_its_rows_does(change: dict[str, Any]) -> None:
    rows = [dict(ROW), dict(ROW, id=2), dict(ROW, **change)]
    columns = {name: [row.get(name) for row in rows] for name in ROW}
    assert any_concerns_a_parent(columns) == any(concerns_a_parent(row) for row in rows)


def test_columns_read_back_as_the_rows_they_were_made_from() -> None:
    rows = [{"id": 1, "state": "queued"}, {"id": 2, "state": "failed"}]
    columns = Columns(id=[1, 2], state=["queued", "failed"])
    assert columns.rows() == rows
    assert Columns().rows() == []
    with pytest.raises(ValueError):  # fields of different lengths are a bug, not a batch
        Columns(id=[1, 2], state=["queued"]).rows()
