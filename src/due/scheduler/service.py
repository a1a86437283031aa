"""The scheduler: while it leads, it turns due schedule times into runs.

It runs inside every worker (and alone as `due scheduler`). Every tick it
renews or tries to take the leader lease; the leader then materialises each
schedule whose next time has come — one transaction per schedule, planned by
the pure `planner.plan` — starts runs that waited for their previous one,
and prunes old history. It sleeps until the earliest next fire time (at most
a tick), so a run is created on time, and the worker that claims it is woken
by the run's own notification. That time is the database's, compared with the
worker's estimate of the database's clock (kept on the monotonic clock), and
the sleep is never shorter than `RECHECK_SECONDS`: a fire time that looks past
while the database finds nothing due (a clock step not yet measured again)
doubles it, up to a tick.

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

from due.core.schedules import Materialised, Outcome, Plan, StoredSchedule, schedule_problem
from due.logs import event
from due.scheduler.leader import Leadership
from due.scheduler.planner import plan
from due.service import Calls, Recheck
from due.store import Store

log = logging.getLogger("due.scheduler")
TICK_SECONDS = 1.0
RECHECK_SECONDS = 0.01
"""The scheduler's floor: the shortest sleep a next fire time can ask for. A
round whose fire time looked due and that materialised nothing doubles it
(up to a tick), so clocks that disagree cost a few rounds, not a spin."""


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
        self._recheck = Recheck(RECHECK_SECONDS, TICK_SECONDS)

    async def run_once(self) -> SchedulerRound:
        looked_due = self._seconds_to_fire() <= 0
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
        self._paced(done, looked_due)
        self._next_fire = await call(store.schedule_next_fire)
        return done

    def _paced(self, done: SchedulerRound, looked_due: bool) -> None:
        """A round that a fire time called for and that did nothing makes the next
        such sleep longer; one that did something resets it."""
        if done.materialised or done.started_pending:
            self._recheck.found()
        elif looked_due:
            self._recheck.missed()

    def interval(self) -> float:
        if not self.leadership.is_leader:
            return TICK_SECONDS
        return max(min(self._seconds_to_fire(), TICK_SECONDS), self._recheck.seconds)

    def _seconds_to_fire(self) -> float:
        """Until the earliest next fire time, on the database's clock (inf: none)."""
        if self._next_fire is None:
            return float("inf")
        return (self._next_fire - self._database_now()).total_seconds()

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
            if firing.outcome == Outcome.MISSED:
                continue  # summed up below: one line for the catch-up, not one per time
            level = (
                logging.INFO if firing.outcome.value in ("enqueued", "pending") else logging.WARNING
            )
            # A field without a value is left out: `reason=None` on every run read as a problem.
            known = {"job": job_id, "reason": firing.reason}
            event(
                log,
                f"schedule.{firing.outcome.value}",
                level,
                schedule=result.schedule,
                scheduled_for=firing.scheduled_for.isoformat(),
                **{name: value for name, value in known.items() if value is not None},
            )
        _report_missed(result)

    def stop(self) -> None:
        """Hand the lease over at once (another scheduler need not wait for it to expire)."""
        self.leadership.release()


def _report_missed(result: Materialised) -> None:
    """One WARNING for the times a schedule missed in one materialisation (a
    worker down for six minutes under an every-10-seconds schedule: 30 or so):
    how many, the first and the last, the policy applied. Each time is recorded
    in the database (`due schedule runs NAME`) and logged at DEBUG."""
    missed = [firing for firing, _ in result.recorded if firing.outcome == Outcome.MISSED]
    if not missed:
        return
    one_by_one = [firing for firing in missed if firing.times == 1]
    for firing in one_by_one:
        event(
            log,
            "schedule.missed_time",
            logging.DEBUG,
            schedule=result.schedule,
            scheduled_for=firing.scheduled_for.isoformat(),
            reason=firing.reason,
        )
    rest = [firing.reason for firing in missed if firing.times > 1]
    shown = one_by_one or missed
    event(
        log,
        "schedule.missed",
        logging.WARNING,
        schedule=result.schedule,
        missed=sum(firing.times for firing in missed),
        first=shown[0].scheduled_for.isoformat(),
        last=shown[-1].scheduled_for.isoformat(),
        policy=result.misfire.value if result.misfire else None,
        **({"more": rest[0]} if rest else {}),
        note="no scheduler created their runs within the misfire grace; each is "
        f"recorded: due schedule runs {result.schedule}",
    )
