"""An app's schedules: those defined in code, and those stored at run time.

`App.schedule(...)` and its siblings delegate here (the App keeps one screen
per concern): definitions are checked against the app's tasks when they are
made (scheduler/registration.py), code-defined ones are synced to the
database by each worker at start, and run-time ones go straight to it.
"""

from __future__ import annotations

from collections.abc import Callable

from due.core.schedules import Schedule, ScheduleOverview, ScheduleRun, SyncReport
from due.errors import ConfigurationError, ScheduleNotFoundError
from due.store import Store


class ScheduleCatalog:
    def __init__(self, *, store: Callable[[], Store]) -> None:
        self._store = store
        self.defined: dict[str, Schedule] = {}
        """The schedules defined in code, by name."""

    def define(self, schedule: Schedule) -> Schedule:
        if schedule.name in self.defined:
            raise ConfigurationError(f"a schedule named {schedule.name!r} is already defined")
        self.defined[schedule.name] = schedule
        return schedule

    def add(self, schedule: Schedule) -> Schedule:
        self._store().schedule_add(schedule)
        return schedule

    def sync(self) -> SyncReport:
        return self._store().schedule_sync(list(self.defined.values()))

    def overview(self) -> list[ScheduleOverview]:
        return self._store().schedule_overview()

    def runs(self, name: str, limit: int) -> list[ScheduleRun]:
        store = self._store()
        runs = store.schedule_runs(name, limit)
        if not runs and name not in {s.name for s in store.schedule_list()}:
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
        return runs

    def pause(self, name: str, paused: bool) -> None:
        if not self._store().schedule_pause(name, paused):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")

    def trigger(self, name: str) -> int:
        """Start a run now; its job id."""
        return self._store().schedule_trigger(name)

    def remove(self, name: str) -> None:
        if name in self.defined:
            raise ConfigurationError(
                f"schedule {name!r} is defined in code: delete it there (workers then "
                "disable it when they start), or pause it"
            )
        if not self._store().schedule_remove(name):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
