"""Schedules in the database: their definitions, runs and materialisation.

Materialising a schedule is one transaction: check the caller still holds the
leader lease, lock the schedule row, plan every due time, record each one in
due_schedule_runs (primary key (schedule, scheduled_for): a second scheduler
inserts nothing), insert the jobs of the runs to start, and move the next fire
time, all or nothing. A schedule whose plan says it cannot fire is marked
with the problem instead (and no longer listed as due) until its definition
is written again.

A sync, or a prune, that replaces or disables a definition first settles the
times already due under it, the same way, in the same transaction: no time
due under the old definition vanishes with it (scheduler/catalog.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from due import instrumentation
from due.core.schedules import (
    Decide,
    Firing,
    LeaseFence,
    Materialised,
    Outcome,
    Overlap,
    Plan,
    Schedule,
    ScheduleOverview,
    ScheduleRun,
    StoredSchedule,
    SyncReport,
    stored_schedule,
)
from due.errors import ConfigurationError, ScheduleNotFoundError
from due.instrumentation import Sending
from due.payload import with_headers
from due.store.backend import Backend, DuplicateError, Transaction
from due.store.settling import settle
from due.store.stats import count_endings


def sync(db: Backend, schedules: Sequence[Schedule], decide: Decide) -> SyncReport:
    """Add and change code-defined schedules to match `schedules` (never disable)."""
    with db.transaction() as tx:
        if tx.locks_rows:
            tx.run("lock_schedule_sync")  # one sync at a time (SQLite: one writer anyway)
        now = tx.instant()
        stored = [stored_schedule(row) for row in tx.run("list_schedule_rows")]
        report = plan_sync(schedules, stored)
        for schedule in report.to_add:
            tx.run("insert_schedule", definition_params(schedule, "code", now))
        for schedule in report.to_change:
            settled = _settle(tx, schedule.name, decide, now)
            if settled is not None:
                report.settled.append(settled)
            tx.run("update_schedule", definition_params(schedule, "code", now))
    return report


def prune(db: Backend, defined: Sequence[str], decide: Decide) -> list[str]:
    """Disable the code schedules not in `defined`, their due times settled first."""
    with db.transaction() as tx:
        if tx.locks_rows:
            tx.run("lock_schedule_sync")
        now = tx.instant()
        stored = [stored_schedule(row) for row in tx.run("list_schedule_rows")]
        gone = not_in_code(defined, stored)
        for name in gone:
            _settle(tx, name, decide, now)
            tx.run("disable_schedule", {"name": name, "now": now})
    return gone


def add(db: Backend, schedule: Schedule) -> None:
    """Store a schedule defined at run time (ConfigurationError if the name exists)."""
    try:
        with db.transaction() as tx:
            tx.run("insert_schedule", definition_params(schedule, "runtime", tx.instant()))
    except DuplicateError:
        raise ConfigurationError(
            f"a schedule named {schedule.name!r} already exists; remove it first "
            "or choose another name"
        ) from None


def remove(db: Backend, name: str) -> bool:
    """Delete a schedule (its run history stays); False when there was none."""
    with db.transaction(single=True) as tx:
        return bool(tx.run("delete_schedule", {"name": name}))


def pause(db: Backend, name: str, paused: bool) -> bool:
    """Pause or resume; False when there is no such schedule."""
    with db.transaction(single=True) as tx:
        return bool(tx.run("pause_schedule", {"name": name, "paused": paused, "now": tx.now}))


def list_all(db: Backend) -> list[StoredSchedule]:
    with db.transaction(read=True) as tx:
        return [stored_schedule(row) for row in tx.run("list_schedule_rows")]


def overview(db: Backend) -> list[ScheduleOverview]:
    with db.transaction(read=True) as tx:
        rows = tx.run("schedule_overview")
    return [
        ScheduleOverview(
            stored_schedule(row),
            row["last_run_at"],
            row["last_run_state"],
            row["last_success_at"],
            row["skipped"],
            row["missed"],
            row["missed_total"],
            row["created_at"],
        )
        for row in rows
    ]


def runs(db: Backend, name: str, limit: int = 50) -> list[ScheduleRun]:
    with db.transaction(read=True) as tx:
        return [
            ScheduleRun(**row) for row in tx.run("schedule_runs", {"name": name, "limit": limit})
        ]


def runs_since(db: Backend, name: str, since: datetime) -> list[ScheduleRun]:
    """The recorded runs of a window, oldest first."""
    with db.transaction(read=True) as tx:
        rows = tx.run("schedule_runs_since", {"name": name, "since": since})
    return [ScheduleRun(**row) for row in rows]


def due_names(db: Backend) -> list[str]:
    """Enabled schedules whose next fire time has come."""
    with db.transaction(read=True) as tx:
        return [row["name"] for row in tx.run("due_schedule_names", {"now": tx.now})]


def next_fire(db: Backend) -> datetime | None:
    """The earliest next fire time of any enabled schedule."""
    with db.transaction(read=True) as tx:
        value: datetime | None = tx.run("next_schedule_fire")[0]["next_fire_at"]
    return value


def materialize(
    db: Backend, name: str, decide: Decide, fence: LeaseFence | None = None
) -> Materialised | None:
    """Record and start a schedule's due runs, in one transaction; None if not ours."""
    with db.transaction(leader=fence is not None) as tx:
        now = tx.instant()
        if fence is not None and not _holds(tx, fence):
            return None
        rows = tx.run("lock_schedule", {"name": name})
        if not rows or not rows[0]["enabled"]:
            return None
        stored = stored_schedule(rows[0])
        if stored.next_fire_at > now:
            return Materialised(name, [], stored.next_fire_at)
        activity = tx.run("schedule_activity", {"name": name})[0]
        plan = decide(stored, now, bool(activity["active"]), bool(activity["pending"]))
        if plan.problem is not None:  # not fired until its definition is written again
            tx.run("set_schedule_problem", {"name": name, "problem": plan.problem})
            return Materialised(name, [], None, problem=plan.problem)
        recorded = _record(tx, stored, plan, now)
        tx.run("set_next_fire", {"name": name, "next_fire_at": plan.next_fire_at})
    return Materialised(name, recorded, plan.next_fire_at, misfire=stored.schedule.misfire)


def _settle(tx: Transaction, name: str, decide: Decide, now: datetime) -> Materialised | None:
    """Before a definition is replaced or disabled: its times already due, under it."""
    rows = tx.run("lock_schedule", {"name": name})
    if not rows or not rows[0]["enabled"]:
        return None  # a disabled schedule has no due times
    stored = stored_schedule(rows[0])
    if stored.next_fire_at > now or stored.problem is not None:
        return None  # nothing due, or nothing that can be planned
    activity = tx.run("schedule_activity", {"name": name})[0]
    plan = decide(stored, now, bool(activity["active"]), bool(activity["pending"]))
    if plan.problem is not None:
        return None
    recorded = _record(tx, stored, plan, now)
    return Materialised(name, recorded, plan.next_fire_at, misfire=stored.schedule.misfire)


def _record(
    tx: Transaction, stored: StoredSchedule, plan: Plan, now: datetime
) -> list[tuple[Firing, int | None]]:
    """Apply a plan: each new firing recorded, and its job inserted if it starts."""
    name = stored.name
    if plan.cancel_active:
        # A run with pieces takes them with it; a waiting one ends now.
        cancelled = tx.run("cancel_schedule_runs", {"name": name, "now": now})
        count_endings(tx, cancelled)
        settle(tx, cancelled)
    if plan.of(Outcome.PENDING) and stored.schedule.overlap == Overlap.REPLACE:
        tx.run("supersede_pending", {"name": name})
    recorded: list[tuple[Firing, int | None]] = []
    for firing in plan.firings:
        run = {
            "name": name,
            "scheduled_for": firing.scheduled_for,
            "outcome": firing.outcome.value,
            "reason": firing.reason,
            "now": now,
        }
        if not tx.run("insert_schedule_run", run):
            continue  # recorded already: by another scheduler, or an earlier plan
        job_id = None
        if firing.outcome == Outcome.ENQUEUED:
            moment = firing.scheduled_for
            job_id = _start_run(tx, stored, moment, moment, firing.reason, now)
        recorded.append((firing, job_id))
    missed = sum(1 for firing, _ in recorded if firing.outcome == Outcome.MISSED)
    if missed:
        tx.run("count_missed", {"name": name, "missed": missed})
    return recorded


def with_pending_runs(db: Backend) -> list[str]:
    """Schedules with a run waiting for its previous one."""
    with db.transaction(read=True) as tx:
        return [row["name"] for row in tx.run("schedules_with_pending")]


def start_pending_run(db: Backend, name: str, fence: LeaseFence | None = None) -> int | None:
    """Start the oldest run waiting for its previous one, if that one has ended."""
    with db.transaction(leader=fence is not None) as tx:
        now = tx.instant()
        if fence is not None and not _holds(tx, fence):
            return None
        rows = tx.run("lock_schedule", {"name": name})
        stopped = not_running_reason(rows[0] if rows else None)
        if stopped is not None:  # its waiting runs will not start: say why
            tx.run("skip_pending_runs", {"name": name, "reason": stopped})
            return None
        if tx.run("schedule_activity", {"name": name})[0]["active"]:
            return None
        pending = tx.run("oldest_pending_run", {"name": name})
        if not pending:
            return None
        reason = "started when the previous run ended"
        stored = stored_schedule(rows[0])
        return _start_run(tx, stored, pending[0]["scheduled_for"], now, reason, now)


def trigger(db: Backend, name: str) -> int:
    """Start a run now (by hand); returns its job id."""
    with db.transaction() as tx:
        now = tx.instant()
        rows = tx.run("lock_schedule", {"name": name})
        if not rows:
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
        reason = "triggered by hand"
        run = {
            "name": name,
            "scheduled_for": now,
            "outcome": "enqueued",
            "reason": reason,
            "now": now,
        }
        tx.run("insert_schedule_run", run)
        job_id = _start_run(tx, stored_schedule(rows[0]), now, now, reason, now)
    assert job_id is not None
    return job_id


def _holds(tx: Transaction, fence: LeaseFence) -> bool:
    params = {
        "name": fence.name,
        "holder": fence.holder,
        "token": fence.token,
        "ttl": 0.0,
        "now": tx.now,
    }
    return bool(tx.run("lease_is_held", params))


def _start_run(
    tx: Transaction,
    stored: StoredSchedule,
    scheduled_for: datetime,
    run_at: datetime,
    reason: str | None,
    now: datetime,
) -> int | None:
    schedule = stored.schedule
    payload = schedule.payload
    if instrumentation.enqueue_hooks:  # a trace context for the run (its own trace)
        sending = Sending(schedule.task, schedule.queue, schedule.name)
        payload = with_headers(payload, instrumentation.headers_for(sending))
    inserted = tx.run(
        "insert_scheduled_job",
        {
            "task": schedule.task,
            "queue": schedule.queue,
            "priority": schedule.priority,
            "payload": payload,
            "run_at": run_at,
            "max_attempts": schedule.max_attempts,
            "name": schedule.name,
            "scheduled_for": scheduled_for,
            "limits": schedule.limits,
            "now": now,
        },
    )
    if not inserted:
        return None
    job_id = int(inserted[0]["id"])
    link = {
        "name": schedule.name,
        "scheduled_for": scheduled_for,
        "job_id": job_id,
        "reason": reason,
    }
    tx.run("link_schedule_run", link)
    return job_id


def not_running_reason(row: Mapping[str, Any] | None) -> str | None:
    """Why a schedule's waiting runs must not start (its row, locked), or None."""
    if row is None:
        return "the schedule was removed"
    if not row["enabled"]:
        return "the schedule is disabled"
    if row["paused"]:
        return "the schedule is paused"
    if row.get("problem"):
        return f"the schedule cannot fire: {row['problem']}"
    return None


def plan_sync(schedules: Sequence[Schedule], stored: Sequence[StoredSchedule]) -> SyncReport:
    """Add new schedules, change those whose definition differs (or that were
    marked as unable to fire: the code's definition, checked when it was made,
    is written again); name the code schedules this code does not define (a
    sync disables none: see prune)."""
    known = {row.name: row for row in stored}
    report = SyncReport()
    for schedule in schedules:
        row = known.get(schedule.name)
        if row is None:
            report.to_add.append(schedule)
        elif (
            row.fingerprint != schedule.fingerprint
            or row.enabled != schedule.enabled
            or row.problem is not None  # written again from the code: tried again
        ):
            report.to_change.append(schedule)
    report.not_in_code = not_in_code([schedule.name for schedule in schedules], stored)
    return report


def not_in_code(defined: Sequence[str], stored: Sequence[StoredSchedule]) -> list[str]:
    """Enabled schedules stored as defined in code whose name is not in `defined`."""
    names = set(defined)
    return [
        row.name for row in stored if row.source == "code" and row.enabled and row.name not in names
    ]


def definition_params(schedule: Schedule, source: str, now: datetime) -> dict[str, Any]:
    """The columns of a schedule's row; it next fires at its first time after `now`."""
    return {
        "name": schedule.name,
        "task": schedule.task,
        "cron": schedule.timing.cron,
        "every": schedule.timing.every,
        "tz": schedule.timing.tz,
        "payload": schedule.payload,
        "queue": schedule.queue,
        "priority": schedule.priority,
        "max_attempts": schedule.max_attempts,
        "misfire": schedule.misfire.value,
        "overlap": schedule.overlap.value,
        "catch_up_limit": schedule.catch_up_limit,
        "misfire_grace": schedule.misfire_grace,
        "source": source,
        "enabled": schedule.enabled,
        "fingerprint": schedule.fingerprint,
        "alert_after": schedule.alert_after,
        "limits": schedule.limits,
        "next_fire_at": schedule.timing.after(now),
        "now": now,
    }
