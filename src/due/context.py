"""The context a handler receives when it declares a parameter of type `due.Context`."""

from __future__ import annotations

import logging
from datetime import datetime


class Context:
    """What a running attempt knows about itself.

    A handler asks for it by annotation, under any parameter name:

        @app.task()
        def resize(ctx: due.Context, image_id: int) -> None:
            ctx.logger.info("attempt %s of job %s", ctx.attempt, ctx.job_id)
    """

    __slots__ = (
        "attempt",
        "job_id",
        "lease_token",
        "logger",
        "max_attempts",
        "queue",
        "scheduled_for",
        "task",
    )

    def __init__(
        self,
        *,
        job_id: int,
        task: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        lease_token: int,
        scheduled_for: datetime | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.job_id = job_id
        self.task = task
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.lease_token = lease_token
        self.scheduled_for = scheduled_for
        """For a run of a schedule: the time it runs for (key its work on this)."""
        self.logger = logger or logging.getLogger(f"due.job.{task}")

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def __repr__(self) -> str:
        return (
            f"Context(job_id={self.job_id}, task={self.task!r}, attempt={self.attempt}/"
            f"{self.max_attempts}, lease_token={self.lease_token})"
        )
