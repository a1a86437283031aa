"""One acknowledgement carries every kind of end at once (both stores).

On SQLite the batch is one statement over all its rows (queries.sql,
complete_jobs), as on PostgreSQL: each row must still end as it would alone,
fenced by its own token, and be counted once.
"""

from __future__ import annotations

import datetime as dt

import due
from due.clock import FakeClock
from due.core.jobs import AttemptError, JobState
from due.core.records import ClaimRequest, Completion


def test_every_kind_of_end_in_one_batch_ends_each_job_as_alone(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="t")
    def t(n: int) -> None: ...

    for n in range(7):
        t.enqueue(n)
    jobs = app.store.job_claim(ClaimRequest("default", 7, "w", 60.0))
    ok, failed, later, again, asked, stale, warned = jobs
    app.cancel(asked.id)  # running: its end is a cancel, its result kept
    at = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)

    def error(text: str) -> AttemptError:
        return AttemptError(attempt=1, error=text, traceback=None, at=at)

    applied = app.store.job_complete(
        [
            Completion(ok.id, ok.lease_token, JobState.SUCCEEDED, result='"ok"', seconds=0.01),
            Completion(failed.id, failed.lease_token, JobState.FAILED, error=error("boom")),
            Completion(later.id, later.lease_token, JobState.QUEUED, error=error("x"), retry_in=30),
            Completion(again.id, again.lease_token, JobState.QUEUED, error=error("y"), retry_in=0),
            Completion(asked.id, asked.lease_token, JobState.SUCCEEDED, result='"kept"'),
            Completion(stale.id, stale.lease_token - 1, JobState.SUCCEEDED, result='"no"'),
            Completion(
                warned.id, warned.lease_token, JobState.SUCCEEDED, result="1", warning="odd"
            ),
        ]
    )

    assert applied == {job.id for job in jobs} - {stale.id}
    assert app.get(ok.id).state == JobState.SUCCEEDED and app.get(ok.id).result == "ok"
    gone = app.get(failed.id)
    assert gone.state == JobState.FAILED and gone.last_error == "boom"
    waiting = app.get(later.id)
    assert waiting.state == JobState.QUEUED and waiting.last_error == "x"
    assert waiting.run_at == clock.now() + dt.timedelta(seconds=30)
    due_again = app.get(again.id)
    assert due_again.state == JobState.QUEUED and due_again.run_at == clock.now()
    cancelled = app.get(asked.id)
    assert cancelled.state == JobState.CANCELLED and cancelled.result == "kept"
    assert cancelled.last_error == "cancelled on request"
    assert app.get(stale.id).state == JobState.RUNNING  # fenced: its token moved on
    odd = app.get(warned.id)
    assert odd.state == JobState.SUCCEEDED and odd.warning == "odd" and odd.result == 1

    (figures,) = app.store.stats_figures()
    counts = figures.window("total").counts
    assert counts["succeeded"] == 1 and counts["warned"] == 1 and counts["failed"] == 1
    assert counts["retried"] == 2 and counts["cancelled"] == 1
