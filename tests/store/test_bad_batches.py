"""A row the database refuses never holds the rest of its batch hostage (both stores).

Bad values are refused where they are produced (tests/integration/
test_bad_values.py); these rows are made by hand to reach the store anyway,
as a value that slipped past a check would.
"""

from __future__ import annotations

import datetime as dt

import due
from due.core.jobs import AttemptError, JobState
from due.core.records import ClaimRequest, Completion, Lease


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
