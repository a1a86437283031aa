"""What a worker does before it claims: it registers itself (waiting, with
backoff, for a database not up yet), measures the database's clock, and, when
it runs the scheduler, brings the stored schedules in line with the code
(a stored schedule this code does not define is said, and kept).
"""

from __future__ import annotations

import asyncio
import logging

from due.app import App
from due.errors import StoreUnavailableError
from due.logs import event
from due.worker.calls import StoreCalls
from due.worker.clock_watch import ClockWatch
from due.worker.statements import Statements

log = logging.getLogger("due.worker")


async def register(statements: Statements, clock_watch: ClockWatch) -> None:
    """Register this worker, waiting out a database not up yet, and measure its clock."""
    backoff = 0.2
    while True:
        try:
            await statements.register()
            await clock_watch.run_once()
            return
        except StoreUnavailableError as error:
            event(log, "worker.waiting_for_database", logging.WARNING, error=str(error))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)


async def sync_schedules(app: App, call: StoreCalls) -> None:
    """Bring the stored schedules in line with the code, saying what changed."""
    report = await call(app.sync_schedules)
    for name in report.added:
        event(log, "schedule.added", schedule=name)
    settled = {result.schedule: len(result.recorded) for result in report.settled}
    for name in report.changed:  # with how many times due under the old definition
        event(log, "schedule.changed", schedule=name, settled=settled.get(name, 0))
    for name in report.not_in_code:
        event(
            log,
            "schedule.not_in_code",
            logging.WARNING,
            schedule=name,
            reason="stored as defined in code, not defined by this app: it keeps firing "
            "(newer code may define it) until `due schedule prune`; if this code should "
            "define it, import the module that declares it from the app module",
        )
