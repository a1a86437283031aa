"""Defining a schedule: every argument checked, with a message that says what to fix
(the value type, `Schedule`, is in `due.core.schedules`)."""

from __future__ import annotations

from typing import Any

from due.core.schedules import (
    DEFAULT_ALERT_AFTER_SECONDS,
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_MISFIRE,
    DEFAULT_MISFIRE_GRACE_SECONDS,
    DEFAULT_OVERLAP,
    MAX_SCHEDULE_NAME,
    Misfire,
    Overlap,
    Schedule,
)
from due.core.timing import Timing, check_cron, check_interval, zone
from due.durations import DurationLike, to_seconds
from due.errors import ConfigurationError
from due.payload import DEFAULT_MAX_PAYLOAD_BYTES, encode_arguments, unstorable


def define_schedule(
    name: str,
    *,
    task: str,
    cron: str | None = None,
    every: DurationLike | None = None,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    tz: str = "UTC",
    misfire: Misfire | str = DEFAULT_MISFIRE,
    overlap: Overlap | str = DEFAULT_OVERLAP,
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
    misfire_grace: DurationLike = DEFAULT_MISFIRE_GRACE_SECONDS,
    queue: str,
    priority: int,
    max_attempts: int,
    enabled: bool = True,
    alert_after: DurationLike = DEFAULT_ALERT_AFTER_SECONDS,
) -> Schedule:
    """Validate a schedule; every problem is a ConfigurationError that says what to fix.

    `queue`, `priority` and `max_attempts` are the task's unless the schedule
    overrides them (the App resolves them), so a scheduler that does not know
    the task still enqueues its runs right.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_SCHEDULE_NAME:
        raise ConfigurationError(
            f"schedule name must be a non-empty string of at most {MAX_SCHEDULE_NAME} "
            f"characters, got {name!r}"
        )
    if (problem := unstorable(name)) is not None:  # SQLite kept a NUL, PostgreSQL refused it
        raise ConfigurationError(f"schedule name {name!r} holds {problem}")
    if (cron is None) == (every is None):
        raise ConfigurationError(
            f"schedule {name!r}: give exactly one of cron=... (e.g. '0 2 * * *') "
            "or every=... (e.g. '90s')"
        )
    zone(tz)
    timing = Timing(
        check_cron(cron) if cron is not None else None,
        check_interval(every) if every is not None else None,
        tz,
    )
    if not isinstance(catch_up_limit, int) or catch_up_limit < 1:
        raise ConfigurationError(f"schedule {name!r}: catch_up_limit must be a whole number >= 1")
    grace = to_seconds(misfire_grace, what=f"schedule {name!r}: misfire_grace")
    alert = to_seconds(alert_after, what=f"schedule {name!r}: alert_after")
    if alert <= 0:
        raise ConfigurationError(f"schedule {name!r}: alert_after must be positive")
    arguments = tuple(args)
    keywords = dict(kwargs or {})
    return Schedule(
        name=name,
        task=task,
        timing=timing,
        payload=encode_arguments(task, arguments, keywords, DEFAULT_MAX_PAYLOAD_BYTES),
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        misfire=_policy(Misfire, misfire, name, "misfire"),
        overlap=_policy(Overlap, overlap, name, "overlap"),
        catch_up_limit=catch_up_limit,
        misfire_grace=grace,
        enabled=bool(enabled),
        alert_after=alert,
        args=arguments,
        kwargs=keywords,
    )


def _policy(kind: type[Misfire] | type[Overlap], value: object, name: str, what: str) -> Any:
    try:
        return kind(str(value))
    except ValueError:
        choices = ", ".join(repr(member.value) for member in kind)
        raise ConfigurationError(
            f"schedule {name!r}: {what}={value!r} is not a policy; choose one of {choices}"
        ) from None
