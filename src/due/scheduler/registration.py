"""A schedule defined by an App: its task resolved, its arguments checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from due.core.schedules import DEFAULT_ALERT_AFTER_SECONDS, Misfire, Overlap, Schedule
from due.durations import DurationLike
from due.errors import ConfigurationError, InvalidJobError
from due.limits import job_limits
from due.payload import with_redaction
from due.request import validate_priority, validate_queue
from due.scheduler.definition import define_schedule
from due.shown_arguments import secret_texts
from due.task import Registry, Task


@dataclass(frozen=True, slots=True)
class ScheduleTiming:
    """When a schedule fires and what it does about missed and overlapping runs,
    as given to `app.schedule` (validated by define_schedule)."""

    cron: str | None
    every: DurationLike | None
    tz: str
    misfire: Misfire | str
    overlap: Overlap | str
    catch_up_limit: int
    misfire_grace: DurationLike
    alert_after: DurationLike = DEFAULT_ALERT_AFTER_SECONDS


def define_for_app(
    tasks: Registry,
    name: str,
    timing: ScheduleTiming,
    task: Task[Any, Any] | str,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    queue: str | None,
    priority: int | None,
    enabled: bool = True,
    *,
    max_payload_bytes: int,
    now: datetime,
) -> Schedule:
    """Validate everything now, so a bad schedule fails at import, not at 2 am
    (`now`: the app clock's, to check that it fires within the horizon;
    `max_payload_bytes`: the App's limit on arguments, as for its jobs)."""
    resolved = tasks.get(task.name if isinstance(task, Task) else task)
    resolved.check_arguments(tuple(args), dict(kwargs or {}))
    try:
        queue_name = validate_queue(queue) if queue is not None else resolved.config.queue
        level = validate_priority(priority) if priority is not None else resolved.config.priority
    except InvalidJobError as error:
        raise ConfigurationError(f"schedule {name!r}: {error}") from None
    try:  # its runs count against its task's limits, keyed by its fixed arguments
        positional, keywords = tuple(args), kwargs or {}
        secrets = secret_texts(
            positional, keywords, resolved.redact, resolved.redacted_positions, min_length=1
        )
        limits = job_limits(
            resolved.name, resolved.config.limits, positional, keywords, None, secrets
        )
    except InvalidJobError as error:
        raise ConfigurationError(f"schedule {name!r}: {error}") from None
    schedule = define_schedule(
        name,
        task=resolved.name,
        cron=timing.cron,
        every=timing.every,
        args=tuple(args),
        kwargs=dict(kwargs or {}),
        tz=timing.tz,
        misfire=timing.misfire,
        overlap=timing.overlap,
        catch_up_limit=timing.catch_up_limit,
        misfire_grace=timing.misfire_grace,
        queue=queue_name,
        priority=level,
        max_attempts=resolved.config.retry.max_attempts,
        enabled=enabled,
        alert_after=timing.alert_after,
        max_payload_bytes=max_payload_bytes,
        now=now,
    )
    if resolved.stores_redaction:  # its runs are shown as its task's jobs are
        hide = resolved.stored_redaction(len(args))
        schedule = dataclasses.replace(schedule, payload=with_redaction(schedule.payload, hide))
    return dataclasses.replace(schedule, limits=limits) if limits is not None else schedule
