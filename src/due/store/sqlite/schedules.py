"""Schedules and leases on SQLite (a mixin of SQLiteStore).

Materialising a schedule is one BEGIN IMMEDIATE transaction: check the caller
still holds the leader lease, plan every due time, record each one in
due_schedule_runs (primary key (schedule, scheduled_for): a second scheduler
inserts nothing), insert the jobs of the runs to start, and move the next fire
time, all or nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from due.core.schedules import (
    Decide,
    LeaseFence,
    Materialised,
    Outcome,
    Overlap,
    Schedule,
    ScheduleOverview,
    ScheduleRun,
    StoredSchedule,
    SyncReport,
    stored_schedule,
)
from due.errors import ConfigurationError
from due.store.schedules import definition_params, not_running_reason, plan_sync
from due.store.sqlite.base import (
    QUERIES,
    SQLiteBase,
    epoch,
    python_row,
    settle,
    to_datetime,
)


class SQLiteSchedules(SQLiteBase):
    def sync_schedules(self, schedules: Sequence[Schedule]) -> SyncReport:
        now = self._now()
        with self._write() as conn:
            rows = conn.execute(QUERIES["list_schedule_rows"]).fetchall()
            report = plan_sync(schedules, [_stored(row) for row in rows])
            for schedule in report.to_add:
                conn.execute(QUERIES["insert_schedule"], _definition(schedule, "code", now))
            for schedule in report.to_change:
                conn.execute(QUERIES["update_schedule"], _definition(schedule, "code", now))
            for name in report.disabled:
                conn.execute(QUERIES["disable_schedule"], {"name": name, "now": now})
        return report

    def add_schedule(self, schedule: Schedule) -> None:
        now = self._now()
        with self._write() as conn:
            if conn.execute(QUERIES["lock_schedule"], {"name": schedule.name}).fetchone():
                raise ConfigurationError(
                    f"a schedule named {schedule.name!r} already exists; remove it first "
                    "or choose another name"
                )
            conn.execute(QUERIES["insert_schedule"], _definition(schedule, "runtime", now))

    def remove_schedule(self, name: str) -> bool:
        with self._write() as conn:
            return conn.execute(QUERIES["delete_schedule"], {"name": name}).fetchone() is not None

    def pause_schedule(self, name: str, paused: bool) -> bool:
        params = {"name": name, "paused": paused, "now": self._now()}
        with self._write() as conn:
            return conn.execute(QUERIES["pause_schedule"], params).fetchone() is not None

    def list_schedules(self) -> list[StoredSchedule]:
        return [_stored(row) for row in self._read("list_schedule_rows", {})]

    def schedule_overview(self) -> list[ScheduleOverview]:
        overviews = []
        for raw in self._read("schedule_overview", {}):
            row = python_row(raw)
            overviews.append(
                ScheduleOverview(
                    stored_schedule(row),
                    row["last_run_at"],
                    row["last_run_state"],
                    row["last_success_at"],
                    row["skipped"],
                    row["missed"],
                )
            )
        return overviews

    def schedule_runs(self, name: str, limit: int = 50) -> list[ScheduleRun]:
        rows = self._read("schedule_runs", {"name": name, "limit": limit})
        return [ScheduleRun(**python_row(row)) for row in rows]

    def due_schedule_names(self) -> list[str]:
        return [row["name"] for row in self._read("due_schedule_names", {"now": self._now()})]

    def next_schedule_fire(self) -> datetime | None:
        value = self._read("next_schedule_fire", {})[0]["next_fire_at"]
        return to_datetime(value) if value is not None else None

    def materialize(
        self, name: str, decide: Decide, fence: LeaseFence | None = None
    ) -> Materialised | None:
        now = self._now()
        with self._write() as conn:
            if fence is not None and not _holds(conn, fence, now):
                return None
            row = conn.execute(QUERIES["lock_schedule"], {"name": name}).fetchone()
            if row is None or not row["enabled"]:
                return None
            stored = _stored(row)
            if epoch(stored.next_fire_at) > now:  # type: ignore[operator]
                return Materialised(name, [], stored.next_fire_at)
            activity = conn.execute(QUERIES["schedule_activity"], {"name": name}).fetchone()
            plan = decide(
                stored, to_datetime(now), bool(activity["active"]), bool(activity["pending"])
            )
            if plan.cancel_active:
                params = {"name": name, "now": now}
                replaced = [dict(r) for r in conn.execute(QUERIES["cancel_schedule_runs"], params)]
                settle(conn, replaced, now)  # a run with pieces takes them with it
            if plan.of(Outcome.PENDING) and stored.schedule.overlap == Overlap.REPLACE:
                conn.execute(QUERIES["supersede_pending"], {"name": name})
            recorded = []
            for firing in plan.firings:
                run = {
                    "name": name,
                    "scheduled_for": epoch(firing.scheduled_for),
                    "outcome": firing.outcome.value,
                    "reason": firing.reason,
                    "now": now,
                }
                if conn.execute(QUERIES["insert_schedule_run"], run).fetchone() is None:
                    continue  # recorded already: by another scheduler, or an earlier plan
                job_id = None
                if firing.outcome == Outcome.ENQUEUED:
                    moment = epoch(firing.scheduled_for)
                    assert moment is not None
                    job_id = _start_run(conn, stored, moment, moment, firing.reason, now)
                recorded.append((firing, job_id))
            conn.execute(
                QUERIES["set_next_fire"],
                {"name": name, "next_fire_at": epoch(plan.next_fire_at)},
            )
        return Materialised(name, recorded, plan.next_fire_at)

    def schedules_with_pending_runs(self) -> list[str]:
        return [row["name"] for row in self._read("schedules_with_pending", {})]

    def start_pending_run(self, name: str, fence: LeaseFence | None = None) -> int | None:
        now = self._now()
        with self._write() as conn:
            if fence is not None and not _holds(conn, fence, now):
                return None
            row = conn.execute(QUERIES["lock_schedule"], {"name": name}).fetchone()
            stopped = not_running_reason(row)
            if stopped is not None:  # its waiting runs will not start: say why
                conn.execute(QUERIES["skip_pending_runs"], {"name": name, "reason": stopped})
                return None
            activity = conn.execute(QUERIES["schedule_activity"], {"name": name}).fetchone()
            if activity["active"]:
                return None
            pending = conn.execute(QUERIES["oldest_pending_run"], {"name": name}).fetchone()
            if pending is None:
                return None
            return _start_run(
                conn,
                _stored(row),
                pending["scheduled_for"],
                now,
                "started when the previous run ended",
                now,
            )

    def trigger_schedule(self, name: str) -> int:
        now = self._now()
        with self._write() as conn:
            row = conn.execute(QUERIES["lock_schedule"], {"name": name}).fetchone()
            if row is None:
                raise ConfigurationError(f"no schedule named {name!r}")
            run = {
                "name": name,
                "scheduled_for": now,
                "outcome": "enqueued",
                "reason": "triggered by hand",
                "now": now,
            }
            conn.execute(QUERIES["insert_schedule_run"], run).fetchall()
            job_id = _start_run(conn, _stored(row), now, now, "triggered by hand", now)
        assert job_id is not None
        return job_id

    # --- leases ---------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: float) -> int | None:
        with self._write() as conn:
            row = conn.execute(
                QUERIES["acquire_lease"], _lease(name, holder, None, ttl, self._now())
            ).fetchone()
        return int(row["token"]) if row else None

    def renew_lease(self, name: str, holder: str, token: int, ttl: float) -> bool:
        with self._write() as conn:
            params = _lease(name, holder, token, ttl, self._now())
            return conn.execute(QUERIES["renew_lease"], params).fetchone() is not None

    def release_lease(self, name: str, holder: str, token: int) -> None:
        with self._write() as conn:
            conn.execute(QUERIES["release_lease"], _lease(name, holder, token, 0, self._now()))


def _stored(row: sqlite3.Row | dict[str, Any]) -> StoredSchedule:
    return stored_schedule(python_row(dict(row)))


def _definition(schedule: Schedule, source: str, now: float) -> dict[str, Any]:
    return definition_params(schedule, source, to_datetime(now), epoch)


def _holds(conn: sqlite3.Connection, fence: LeaseFence, now: float) -> bool:
    params = _lease(fence.name, fence.holder, fence.token, 0, now)
    return conn.execute(QUERIES["lease_is_held"], params).fetchone() is not None


def _start_run(
    conn: sqlite3.Connection,
    stored: StoredSchedule,
    scheduled_for: float,
    run_at: float,
    reason: str | None,
    now: float,
) -> int | None:
    schedule = stored.schedule
    inserted = conn.execute(
        QUERIES["insert_scheduled_job"],
        {
            "task": schedule.task,
            "queue": schedule.queue,
            "priority": schedule.priority,
            "payload": schedule.payload,
            "run_at": run_at,
            "max_attempts": schedule.max_attempts,
            "name": schedule.name,
            "scheduled_for": scheduled_for,
            "now": now,
        },
    ).fetchone()
    if inserted is None:
        return None
    conn.execute(
        QUERIES["link_schedule_run"],
        {
            "name": schedule.name,
            "scheduled_for": scheduled_for,
            "job_id": inserted["id"],
            "reason": reason,
        },
    )
    return int(inserted["id"])


def _lease(name: str, holder: str, token: int | None, ttl: float, now: float) -> dict[str, Any]:
    return {"name": name, "holder": holder, "token": token, "ttl": float(ttl), "now": now}
