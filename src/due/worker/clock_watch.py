"""The clock watch: the worker's estimate of the database's clock, measured again.

Due times and fire times come from the database, on its clock (invariant 5);
the worker waits for them on its own. It reads the database's clock at start
and every `interval` seconds after (one `SELECT now()` on PostgreSQL; free on
SQLite, whose clock is this host's), each reading timed on the monotonic
clock, and keeps the estimate in a `DatabaseClock`. Between readings the
estimate moves with the monotonic clock, so a step of this host's wall clock
(an NTP step, a VM resumed) does not move it; a step of the database's clock
(on SQLite, of this host's) is followed at the next reading. Either step is
logged as `clock.stepped` (WARNING), with how far each clock moved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from due.clock import Clock, ClockStep, DatabaseClock
from due.logs import event
from due.service import Calls

log = logging.getLogger("due.worker")
DEFAULT_CLOCK_INTERVAL = 5.0
"""How often the database's clock is read again: a step of it is followed within
this, at one statement each time (an idle worker makes about ten a second)."""
MIN_CLOCK_INTERVAL = 0.1
"""The watch's floor: readings more often than this would only cost statements."""


class ClockWatch:
    def __init__(
        self,
        *,
        database_clock: DatabaseClock,
        clock: Clock,
        read: Callable[[], datetime],
        call: Calls,
        interval: float = DEFAULT_CLOCK_INTERVAL,
        on_step: Callable[[], None] = lambda: None,
    ) -> None:
        """`read`: the database's clock (the store's `now`), called in `call`'s thread;
        `on_step`: called after a step, so that waits computed before it end."""
        self._database_clock = database_clock
        self._clock = clock
        self._read = read
        self._call = call
        self._interval = interval
        self._on_step = on_step

    def interval(self) -> float:
        return max(self._interval, MIN_CLOCK_INTERVAL)

    async def run_once(self) -> ClockStep | None:
        database, sent_at, received_at = await self._call(self._timed_read)
        step = self._database_clock.observe(database, sent_at, received_at)
        if step is not None:
            event(
                log,
                "clock.stepped",
                logging.WARNING,
                host_clock_moved=round(step.host, 3),
                database_clock_moved=round(step.database, 3),
                database_ahead_by=round(step.offset, 3),
                note="waits follow the database's clock, measured again",
            )
            self._on_step()
        return step

    def _timed_read(self) -> tuple[datetime, float, float]:
        """The database's clock, between two monotonic instants (in the thread, so
        the wait for a thread is not counted in the round trip)."""
        sent_at = self._clock.monotonic()
        database = self._read()
        return database, sent_at, self._clock.monotonic()
