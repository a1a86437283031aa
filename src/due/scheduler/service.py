"""The scheduler: while it leads, it turns due schedule times into runs.

It runs inside every worker (and alone as `due scheduler`). Every tick it
renews or tries to take the leader lease; the leader then materialises each
schedule whose next time has come — one transaction per schedule, planned by
the pure `planner.plan` — starts runs that waited for their previous one,
and prunes old history. It sleeps until the earliest next fire time (at most
a tick), so a run is created on time, and the worker that claims it is woken
by the run's own notification.

One schedule never stops the others: a definition that cannot fire (a cron
expression with no time, an interval past the horizon, a row written by
hand or by a version of `due` that did not check) is not planned. Its row is
marked with the reason, logged once as `schedule.invalid` at ERROR, reported
by `due check`, and left unfired until its definition is written again (the
next worker start writes a code schedule's); the other schedules run on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from due.core.schedules import Materialised, Plan, StoredSchedule, schedule_problem
from due.logs import event
from due.scheduler.leader import Leadership
from due.scheduler.planner import plan
from due.service import Calls
from due.store import Store

log = logging.getLogger("due.scheduler")
TICK_SECONDS = 1.0


@dataclass
class SchedulerRound:
    leading: bool
    materialised: list[Materialised] = field(default_factory=list)
    started_pending: list[int] = field(default_factory=list)


def decide(stored: StoredSchedule, now: datetime, active: bool, pending: bool) -> Plan:
    """The plan of one schedule's due times, or a Plan with the `problem` that
    keeps it from firing (never an exception: see the module's doc)."""
    problem = stored.problem or schedule_problem(stored.schedule, now)
    if problem:
        return Plan(problem=problem)
    try:
        return plan(
            stored.schedule,
            stored.next_fire_at,
            now,
            active=active,
            pending=pending,
            paused=stored.paused,
        )
    except Exception as error:  # a definition the checks let through: this one alone
        return Plan(problem=f"its times cannot be planned ({type(error).__name__}: {error})")


class Scheduler:
    def __init__(
        self,
        *,
        store: Store,
        call: Calls,
        leadership: Leadership,
        database_now: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._call = call
        self.leadership = leadership
        self._database_now = database_now
        self._next_fire: datetime | None = None

    async def run_once(self) -> SchedulerRound:
        call = self._call
        store = self._store
        leading = await call(self.leadership.ensure)
        if not leading:
            return SchedulerRound(False)
        fence = self.leadership.fence
        done = SchedulerRound(True)
        for name in await call(store.schedule_due_names):
            result = await call(store.schedule_materialize, name, decide, fence)
            if result is None:
                continue  # no longer ours to act on, or gone
            done.materialised.append(result)
            self._report(result)
        for name in await call(store.schedule_names_with_pending_runs):
            job_id = await call(store.schedule_start_pending_run, name, fence)
            if job_id is not None:
                done.started_pending.append(job_id)
                event(
                    log,
                    "schedule.run_started",
                    schedule=name,
                    job=job_id,
                    reason="the previous run ended",
                )
        self._next_fire = await call(store.schedule_next_fire)
        return done

    def interval(self) -> float:
        if not self.leadership.is_leader or self._next_fire is None:
            return TICK_SECONDS
        until = (self._next_fire - self._database_now()).total_seconds()
        return max(0.0, min(until, TICK_SECONDS))

    def _report(self, result: Materialised) -> None:
        if result.problem is not None:
            event(
                log,
                "schedule.invalid",
                logging.ERROR,
                schedule=result.schedule,
                reason=result.problem,
                fix="correct its definition (in the code, or remove and add it again); "
                "it does not fire until then",
            )
        for firing, job_id in result.recorded:
            level = (
                logging.INFO if firing.outcome.value in ("enqueued", "pending") else logging.WARNING
            )
            event(
                log,
                f"schedule.{firing.outcome.value}",
                level,
                schedule=result.schedule,
                scheduled_for=firing.scheduled_for.isoformat(),
                job=job_id,
                reason=firing.reason,
            )

    def stop(self) -> None:
        """Hand the lease over at once (another scheduler need not wait for it to expire)."""
        self.leadership.release()
