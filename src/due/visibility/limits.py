"""What a job waiting for a limit waits for, in words, from the limit's figures now."""

from __future__ import annotations

from typing import TYPE_CHECKING

from due.core.jobs import Job, JobState
from due.core.limits import WHOLE, Limit, wait_text

if TYPE_CHECKING:
    from due.app import App


def limit_wait(app: App, job: Job) -> str | None:
    """Why a queued job waits for a limit ("waiting for limit stripe: 100 starts
    in the last 1s"), or None when it waits for none."""
    if job.state != JobState.QUEUED or job.limit_wait is None:
        return None
    found = app.store.limit_key(job.limit_wait, job.limit_wait_key or WHOLE)
    if found is None:  # its limit was never stored: the claim caps nothing
        return wait_text(Limit(job.limit_wait), job.limit_wait_key, None)
    numbers, figures = found
    return wait_text(numbers, job.limit_wait_key, figures)
