"""The App's schedule methods (a mixin: the facade stays one screen per concern)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from due.core.jobs import Job
from due.core.schedules import (
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_MISFIRE,
    DEFAULT_MISFIRE_GRACE_SECONDS,
    DEFAULT_OVERLAP,
    Misfire,
    Overlap,
    Schedule,
    ScheduleOverview,
    ScheduleRun,
    SyncReport,
)
from due.durations import DurationLike
from due.errors import ConfigurationError, ScheduleNotFoundError
from due.scheduler.registration import define_for_app

if TYPE_CHECKING:
    from due.store import Store
    from due.task import Task


class ScheduleMethods:
    """Mixed into `due.App`, which provides the store and `get`."""

    defined_schedules: dict[str, Schedule]
    if TYPE_CHECKING:

        @property
        def store(self) -> Store: ...

        def get(self, job_id: int) -> Job: ...

    def schedule(
        self,
        name: str,
        cron: str | None = None,
        every: DurationLike | None = None,
        *,
        task: Task[Any, Any] | str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        tz: str = "UTC",
        misfire: Misfire | str = DEFAULT_MISFIRE,
        overlap: Overlap | str = DEFAULT_OVERLAP,
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
        misfire_grace: DurationLike = DEFAULT_MISFIRE_GRACE_SECONDS,
        queue: str | None = None,
        priority: int | None = None,
        enabled: bool = True,
    ) -> Schedule:
        """Define a recurring schedule in code; workers sync it to the database at start."""
        schedule = define_for_app(
            self,  # type: ignore[arg-type]
            name,
            cron,
            every,
            task,
            args,
            kwargs,
            tz,
            misfire,
            overlap,
            catch_up_limit,
            misfire_grace,
            queue,
            priority,
            enabled,
        )
        if name in self.defined_schedules:
            raise ConfigurationError(f"a schedule named {name!r} is already defined")
        self.defined_schedules[name] = schedule
        return schedule

    def add_schedule(
        self,
        name: str,
        cron: str | None = None,
        every: DurationLike | None = None,
        *,
        task: Task[Any, Any] | str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        tz: str = "UTC",
        misfire: Misfire | str = DEFAULT_MISFIRE,
        overlap: Overlap | str = DEFAULT_OVERLAP,
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
        misfire_grace: DurationLike = DEFAULT_MISFIRE_GRACE_SECONDS,
        queue: str | None = None,
        priority: int | None = None,
    ) -> Schedule:
        """Store a schedule at run time (not in code); it fires from its next time on."""
        schedule = define_for_app(
            self,  # type: ignore[arg-type]
            name,
            cron,
            every,
            task,
            args,
            kwargs,
            tz,
            misfire,
            overlap,
            catch_up_limit,
            misfire_grace,
            queue,
            priority,
            True,
        )
        self.store.schedule_add(schedule)
        return schedule

    def sync_schedules(self) -> SyncReport:
        """Make the database's code-defined schedules match this app's (workers do it)."""
        return self.store.schedule_sync(list(self.defined_schedules.values()))

    def schedules(self) -> list[ScheduleOverview]:
        """Every stored schedule: next run, last run and outcome, skipped and missed runs."""
        return self.store.schedule_overview()

    def schedule_runs(self, name: str, limit: int = 50) -> list[ScheduleRun]:
        """A schedule's scheduled times, newest first, and what became of each
        (a removed schedule's history stays; a name never seen is refused)."""
        runs = self.store.schedule_runs(name, limit)
        if not runs and name not in {s.name for s in self.store.schedule_list()}:
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
        return runs

    def pause_schedule(self, name: str) -> None:
        """Stop starting runs; their times are recorded as skipped until resumed."""
        if not self.store.schedule_pause(name, True):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")

    def resume_schedule(self, name: str) -> None:
        if not self.store.schedule_pause(name, False):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")

    def trigger_schedule(self, name: str) -> Job:
        """Start a run of the schedule now, by hand."""
        return self.get(self.store.schedule_trigger(name))

    def remove_schedule(self, name: str) -> None:
        """Delete a schedule added at run time (its history stays)."""
        if name in self.defined_schedules:
            raise ConfigurationError(
                f"schedule {name!r} is defined in code: delete it there (workers then "
                "disable it when they start), or pause it"
            )
        if not self.store.schedule_remove(name):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
