"""Schedules and leases on PostgreSQL (a mixin of PostgresStore).

Materialising a schedule is one transaction: check the caller still holds the
leader lease, lock the schedule row, plan every due time, record each one in
due_schedule_runs (primary key (schedule, scheduled_for): a second scheduler
inserts nothing), insert the jobs of the runs to start, and move the next fire
time, all or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from due.core.schedules import (
    Decide,
    LeaseFence,
    Materialised,
    Outcome,
    Overlap,
    ScheduleOverview,
    ScheduleRun,
    StoredSchedule,
    SyncReport,
    stored_schedule,
)
from due.errors import ConfigurationError
from due.store.postgres.base import QUERIES, PostgresBase, normalise
from due.store.schedules import definition_params, not_running_reason, plan_sync


class PostgresSchedules(PostgresBase):
    def sync_schedules(self, schedules: Sequence[Any]) -> SyncReport:
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["lock_schedule_sync"])
            now = self._fetch_now(cur)
            cur.execute(QUERIES["list_schedule_rows"])
            stored = [stored_schedule(normalise(row)) for row in cur.fetchall()]
            report = plan_sync(schedules, stored)
            for schedule in report.to_add:
                cur.execute(QUERIES["insert_schedule"], definition_params(schedule, "code", now))
            for schedule in report.to_change:
                cur.execute(QUERIES["update_schedule"], definition_params(schedule, "code", now))
            for name in report.disabled:
                cur.execute(QUERIES["disable_schedule"], {"name": name, "now": now})
        return report

    def add_schedule(self, schedule: Any) -> None:
        with self._cursor(transaction=True) as cur:
            now = self._fetch_now(cur)
            try:
                cur.execute(QUERIES["insert_schedule"], definition_params(schedule, "runtime", now))
            except psycopg.errors.UniqueViolation:
                raise ConfigurationError(
                    f"a schedule named {schedule.name!r} already exists; remove it first "
                    "or choose another name"
                ) from None

    def remove_schedule(self, name: str) -> bool:
        return bool(self._all("delete_schedule", {"name": name}))

    def pause_schedule(self, name: str, paused: bool) -> bool:
        return bool(
            self._all("pause_schedule", {"name": name, "paused": paused, "now": self._now()})
        )

    def list_schedules(self) -> list[StoredSchedule]:
        return [stored_schedule(normalise(row)) for row in self._all("list_schedule_rows", {})]

    def schedule_overview(self) -> list[ScheduleOverview]:
        overviews = []
        for raw in self._all("schedule_overview", {}):
            row = normalise(raw)
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
        rows = self._all("schedule_runs", {"name": name, "limit": limit})
        return [ScheduleRun(**normalise(row)) for row in rows]

    def due_schedule_names(self) -> list[str]:
        return [row["name"] for row in self._all("due_schedule_names", {"now": self._now()})]

    def next_schedule_fire(self) -> datetime | None:
        value = self._all("next_schedule_fire", {})[0]["next_fire_at"]
        return normalise({"t": value})["t"] if value is not None else None

    def materialize(
        self, name: str, decide: Decide, fence: LeaseFence | None = None
    ) -> Materialised | None:
        with self._cursor(transaction=True) as cur:
            now = self._fetch_now(cur)
            if fence is not None and not _holds(cur, fence, now):
                return None
            cur.execute(QUERIES["lock_schedule"], {"name": name})
            row = cur.fetchone()
            if row is None or not row["enabled"]:
                return None
            stored = stored_schedule(normalise(row))
            if stored.next_fire_at > now:
                return Materialised(name, [], stored.next_fire_at)
            cur.execute(QUERIES["schedule_activity"], {"name": name})
            activity = cur.fetchone()
            assert activity is not None
            plan = decide(stored, now, activity["active"], activity["pending"])
            if plan.cancel_active:
                cur.execute(QUERIES["cancel_schedule_runs"], {"name": name, "now": now})
                # A run with pieces takes them with it; a waiting one ends now.
                self._settle(cur, cur.fetchall())
            if plan.of(Outcome.PENDING) and stored.schedule.overlap == Overlap.REPLACE:
                cur.execute(QUERIES["supersede_pending"], {"name": name})
            recorded = []
            for firing in plan.firings:
                cur.execute(
                    QUERIES["insert_schedule_run"],
                    {
                        "name": name,
                        "scheduled_for": firing.scheduled_for,
                        "outcome": firing.outcome.value,
                        "reason": firing.reason,
                        "now": now,
                    },
                )
                if cur.fetchone() is None:
                    continue  # recorded already: by another scheduler, or an earlier plan
                job_id = None
                if firing.outcome == Outcome.ENQUEUED:
                    job_id = _start_run(
                        cur, stored, firing.scheduled_for, firing.scheduled_for, firing.reason, now
                    )
                recorded.append((firing, job_id))
            cur.execute(QUERIES["set_next_fire"], {"name": name, "next_fire_at": plan.next_fire_at})
        return Materialised(name, recorded, plan.next_fire_at)

    def schedules_with_pending_runs(self) -> list[str]:
        return [row["name"] for row in self._all("schedules_with_pending", {})]

    def start_pending_run(self, name: str, fence: LeaseFence | None = None) -> int | None:
        with self._cursor(transaction=True) as cur:
            now = self._fetch_now(cur)
            if fence is not None and not _holds(cur, fence, now):
                return None
            cur.execute(QUERIES["lock_schedule"], {"name": name})
            row = cur.fetchone()
            stopped = not_running_reason(row)
            if stopped is not None:  # its waiting runs will not start: say why
                cur.execute(QUERIES["skip_pending_runs"], {"name": name, "reason": stopped})
                return None
            cur.execute(QUERIES["schedule_activity"], {"name": name})
            activity = cur.fetchone()
            assert activity is not None and row is not None
            if activity["active"]:
                return None
            cur.execute(QUERIES["oldest_pending_run"], {"name": name})
            pending = cur.fetchone()
            if pending is None:
                return None
            return _start_run(
                cur,
                stored_schedule(normalise(row)),
                pending["scheduled_for"],
                now,
                "started when the previous run ended",
                now,
            )

    def trigger_schedule(self, name: str) -> int:
        with self._cursor(transaction=True) as cur:
            now = self._fetch_now(cur)
            cur.execute(QUERIES["lock_schedule"], {"name": name})
            row = cur.fetchone()
            if row is None:
                raise ConfigurationError(f"no schedule named {name!r}")
            run = {
                "name": name,
                "scheduled_for": now,
                "outcome": "enqueued",
                "reason": "triggered by hand",
                "now": now,
            }
            cur.execute(QUERIES["insert_schedule_run"], run)
            job_id = _start_run(
                cur, stored_schedule(normalise(row)), now, now, "triggered by hand", now
            )
        assert job_id is not None
        return job_id

    # --- leases ---------------------------------------------------------------

    def acquire_lease(self, name: str, holder: str, ttl: float) -> int | None:
        rows = self._all("acquire_lease", _lease(name, holder, None, ttl, self._now()))
        return int(rows[0]["token"]) if rows else None

    def renew_lease(self, name: str, holder: str, token: int, ttl: float) -> bool:
        return bool(self._all("renew_lease", _lease(name, holder, token, ttl, self._now())))

    def release_lease(self, name: str, holder: str, token: int) -> None:
        self._all("release_lease", _lease(name, holder, token, 0, self._now()))


def _holds(cur: psycopg.Cursor[dict[str, Any]], fence: LeaseFence, now: datetime) -> bool:
    cur.execute(QUERIES["bound_leader_transaction"])
    cur.execute(QUERIES["lease_is_held"], _lease(fence.name, fence.holder, fence.token, 0, now))
    return cur.fetchone() is not None


def _start_run(
    cur: psycopg.Cursor[dict[str, Any]],
    stored: StoredSchedule,
    scheduled_for: datetime,
    run_at: datetime,
    reason: str | None,
    now: datetime,
) -> int | None:
    schedule = stored.schedule
    cur.execute(
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
    )
    inserted = cur.fetchone()
    if inserted is None:
        return None
    cur.execute(
        QUERIES["link_schedule_run"],
        {
            "name": schedule.name,
            "scheduled_for": scheduled_for,
            "job_id": inserted["id"],
            "reason": reason,
        },
    )
    return int(inserted["id"])


def _lease(name: str, holder: str, token: int | None, ttl: float, now: Any) -> dict[str, Any]:
    return {"name": name, "holder": holder, "token": token, "ttl": float(ttl), "now": now}
