"""The job table is vacuumed when its dead row versions pile up, whether or not
the server's autovacuum runs (this test's server runs with it off)."""

from __future__ import annotations

import time

import due
from due.core.records import ClaimRequest, Completion
from due.store.jobs import VACUUM_DEAD_ROWS
from tests.helpers.database import rows


def dead_rows(url: str) -> int:
    [(dead,)] = rows(url, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'due_jobs'")
    return int(dead)


def test_the_job_table_is_vacuumed_when_its_dead_rows_pile_up(
    app: due.App, backend: str, backend_url: str
) -> None:
    @app.task(name="work")
    def work() -> None: ...

    assert app.store.job_vacuum_if_needed() is None  # nothing to clear
    count = VACUUM_DEAD_ROWS + 2_000
    app.enqueue_many([work.request() for _ in range(count)])
    while claimed := app.store.job_claim(ClaimRequest("default", 1000, "w", 30)):
        app.store.job_complete(
            [Completion(j.id, j.lease_token, due.JobState.SUCCEEDED, "null") for j in claimed]
        )
    if backend == "sqlite":  # a deleted or updated row leaves nothing behind to vacuum
        assert app.store.job_vacuum_if_needed() is None
        return
    deadline = time.monotonic() + 15  # the server's statistics lag commits by about a second
    while dead_rows(backend_url) < VACUUM_DEAD_ROWS and time.monotonic() < deadline:
        time.sleep(0.2)
    vacuumed = app.store.job_vacuum_if_needed()
    assert vacuumed is not None and vacuumed["dead"] >= VACUUM_DEAD_ROWS, vacuumed
    assert dead_rows(backend_url) < VACUUM_DEAD_ROWS
    assert app.store.job_vacuum_if_needed() is None
