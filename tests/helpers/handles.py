"""Checks the tests of grouped enqueues share."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import due


def assert_each_handle_is_its_row(app: due.App, jobs: Sequence[due.Job]) -> None:
    """Each caller's `Job` is its own row as stored (a group's rows matched to
    the wrong callers would differ here): odd arguments were enqueued with a
    60 s delay, even ones without."""
    for job in jobs:
        stored = app.get(job.id)
        assert (stored.args, stored.run_at, stored.created_at) == (
            job.args,
            job.run_at,
            job.created_at,
        )
        assert job.run_at - job.created_at == timedelta(seconds=60 if job.args[0] % 2 else 0)
        assert job.run_at.utcoffset() == timedelta(0)
