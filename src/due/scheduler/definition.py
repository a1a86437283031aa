"""Defining a schedule: every argument checked, with a message that says what to fix
(the value type, `Schedule`, is in `due.core.schedules`).

A schedule must be able to fire within `HORIZON_YEARS` of its definition: a
cron expression with no time in them (February 30th) and a longer interval are
refused here, where the mistake is made, rather than found by every worker's
scheduler later. The same check (`schedule_problem`) guards the scheduler
against definitions that reach the database by another way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from due.core.schedules import (
    DEFAULT_ALERT_AFTER_SECONDS,
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_MISFIRE,
    DEFAULT_MISFIRE_GRACE_SECONDS,
    DEFAULT_OVERLAP,
    MAX_CATCH_UP_LIMIT,
    MAX_SCHEDULE_NAME,
    MAX_SCHEDULE_SECONDS,
    Misfire,
    Overlap,
    Schedule,
)
from due.core.timing import HORIZON_YEARS, Timing, check_cron, check_interval, timing_problem, zone
from due.durations import DurationLike, describe, to_seconds
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
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    now: datetime,
) -> Schedule:
    """Validate a schedule; every problem is a ConfigurationError that says what to fix.

    `now` is when it is defined: its first time must come within the horizon.

    `queue`, `priority` and `max_attempts` are the task's unless the schedule
    overrides them (the App resolves them), so a scheduler that does not know
    the task still enqueues its runs right. Its arguments are held to
    `max_payload_bytes`, the App's limit, as a job's are.
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
    timing = _timing(name, cron, every, tz, now)
    if not isinstance(catch_up_limit, int) or not 1 <= catch_up_limit <= MAX_CATCH_UP_LIMIT:
        raise ConfigurationError(
            f"schedule {name!r}: catch_up_limit must be a whole number from 1 to "
            f"{MAX_CATCH_UP_LIMIT} (a plan examines at most {MAX_CATCH_UP_LIMIT} times)"
        )
    grace = _bounded(misfire_grace, name, "misfire_grace")
    alert = _bounded(alert_after, name, "alert_after")
    if alert <= 0:
        raise ConfigurationError(f"schedule {name!r}: alert_after must be positive")
    arguments = tuple(args)
    keywords = dict(kwargs or {})
    return Schedule(
        name=name,
        task=task,
        timing=timing,
        payload=encode_arguments(task, arguments, keywords, max_payload_bytes),
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


def _timing(
    name: str, cron: str | None, every: DurationLike | None, tz: str, now: datetime
) -> Timing:
    try:
        timing = Timing(
            check_cron(cron) if cron is not None else None,
            check_interval(every) if every is not None else None,
            tz,
        )
    except ConfigurationError as error:
        raise ConfigurationError(f"schedule {name!r}: {error}") from None
    problem = timing_problem(timing, now)
    if problem:
        raise ConfigurationError(f"schedule {name!r}: {problem}")
    return timing


def _bounded(value: DurationLike, name: str, what: str) -> float:
    seconds = to_seconds(value, what=f"schedule {name!r}: {what}")
    if seconds > MAX_SCHEDULE_SECONDS:
        raise ConfigurationError(
            f"schedule {name!r}: {what} of {describe(seconds)} is more than "
            f"{HORIZON_YEARS} years; give at most {describe(MAX_SCHEDULE_SECONDS)}"
        )
    return seconds


def _policy(kind: type[Misfire] | type[Overlap], value: object, name: str, what: str) -> Any:
    try:
        return kind(str(value))
    except ValueError:
        choices = ", ".join(repr(member.value) for member in kind)
        raise ConfigurationError(
            f"schedule {name!r}: {what}={value!r} is not a policy; choose one of {choices}"
        ) from None
