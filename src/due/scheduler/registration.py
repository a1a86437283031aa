"""A schedule defined by an App: its task resolved, its arguments checked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from due.core.schedules import Misfire, Overlap, Schedule
from due.durations import DurationLike
from due.errors import ConfigurationError, InvalidJobError
from due.request import validate_priority, validate_queue
from due.scheduler.definition import define_schedule
from due.task import Task

if TYPE_CHECKING:
    from due.app import App


def define_for_app(
    app: App,
    name: str,
    cron: str | None,
    every: DurationLike | None,
    task: Task[Any, Any] | str,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    tz: str,
    misfire: Misfire | str,
    overlap: Overlap | str,
    catch_up_limit: int,
    misfire_grace: DurationLike,
    queue: str | None,
    priority: int | None,
    enabled: bool,
) -> Schedule:
    """Validate everything now, so a bad schedule fails at import, not at 2 am."""
    resolved = app.tasks.get(task.name if isinstance(task, Task) else task)
    resolved.check_arguments(tuple(args), dict(kwargs or {}))
    try:
        queue_name = validate_queue(queue) if queue is not None else resolved.config.queue
        level = validate_priority(priority) if priority is not None else resolved.config.priority
    except InvalidJobError as error:
        raise ConfigurationError(f"schedule {name!r}: {error}") from None
    return define_schedule(
        name,
        task=resolved.name,
        cron=cron,
        every=every,
        args=tuple(args),
        kwargs=dict(kwargs or {}),
        tz=tz,
        misfire=misfire,
        overlap=overlap,
        catch_up_limit=catch_up_limit,
        misfire_grace=misfire_grace,
        queue=queue_name,
        priority=level,
        max_attempts=resolved.config.retry.max_attempts,
        enabled=enabled,
    )
