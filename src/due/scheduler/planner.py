"""What a schedule does when its time comes: a pure function of time and state.

Given the stored next fire time, the database's now, and whether a previous
run is still active (or one waits for it), `plan` returns one decision per
scheduled time — enqueued, pending (waits for the previous run), skipped
(with the reason) or missed — and the next fire time. The store applies the
plan in one transaction, keyed by (schedule, scheduled_for), so every
scheduled time is accounted for once, whoever computes it.

Misfires: a time is late when it is materialised more than `misfire_grace`
after it. Late times follow the misfire policy; on-time ones always run.
`catch_up` runs every late time (up to `catch_up_limit`), oldest first; unless
the overlap policy is `allow`, one after another: the first starts (or waits
for a run still active), the others wait in line, each started when the one
before it ends. The overlap policy is not asked whether a catch-up run may
wait: skipping it would not be catching up.
Overlap: within one plan, and against an active run, the overlap policy
decides for on-time times; `forbid` and `replace` keep at most one run going,
`queue` keeps at most one waiting (more would pile up without end when runs
outlast the period).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from due.core.schedules import MAX_CATCH_UP_LIMIT, Firing, Misfire, Outcome, Overlap, Plan, Schedule

MAX_RECORDED_TIMES = MAX_CATCH_UP_LIMIT
"""Scheduled times examined per plan; beyond that one row sums up the rest (a
schedule's catch_up_limit is bounded by it)."""
MAX_COUNTED_TIMES = 10_000
"""Cron times counted for that summary: walking a cron expression costs about
20 µs a time, and a plan runs inside the leader's transaction."""


def plan(
    schedule: Schedule,
    next_fire_at: datetime,
    now: datetime,
    *,
    active: bool = False,
    pending: bool = False,
    paused: bool = False,
) -> Plan:
    """Decide every scheduled time from `next_fire_at` up to `now`."""
    times, more, resume_at = _due_times(schedule, next_fire_at, now)
    result = Plan(next_fire_at=resume_at)
    if paused:
        result.firings = [Firing(t, Outcome.SKIPPED, "the schedule is paused") for t in times]
    else:
        catching_up, chosen, missed = _apply_misfire(schedule, times, now)
        result.firings = [Firing(t, Outcome.MISSED, reason) for t, reason in missed]
        catch_ups = _catch_up(schedule, catching_up, active)
        result.firings += catch_ups
        active = active or any(f.outcome == Outcome.ENQUEUED for f in catch_ups)
        pending = pending or any(f.outcome == Outcome.PENDING for f in catch_ups)
        result.firings += _apply_overlap(schedule, chosen, active, pending, result)
    if more:
        first, count, exact = more
        result.firings.append(
            Firing(
                first,
                Outcome.MISSED,
                f"{'' if exact else 'at least '}{count} more scheduled times until "
                f"{resume_at.isoformat() if resume_at else 'now'} were not run",
                times=count,
            )
        )
    result.firings.sort(key=lambda firing: firing.scheduled_for)
    return result


def _due_times(
    schedule: Schedule, next_fire_at: datetime, now: datetime
) -> tuple[list[datetime], tuple[datetime, int, bool] | None, datetime]:
    """Times due by `now` (at most MAX_RECORDED_TIMES); the rest, as their first
    time and their count (and whether it is exact: see _count); the next."""
    times: list[datetime] = []
    if next_fire_at > now:
        return times, None, next_fire_at
    firings = schedule.timing.firings_after(next_fire_at - timedelta(microseconds=1))
    for moment in firings:
        if moment > now:
            return times, None, moment
        if len(times) == MAX_RECORDED_TIMES:
            resume_at = schedule.timing.after(now)
            return times, (moment, *_count(schedule, moment, now)), resume_at
        times.append(moment)
    raise AssertionError("a schedule's firings never end")


def _count(schedule: Schedule, first: datetime, now: datetime) -> tuple[int, bool]:
    """How many times from `first` to `now`, and whether that is exact: it is for
    intervals (arithmetic), and for cron up to MAX_COUNTED_TIMES (at least that,
    beyond)."""
    if schedule.timing.every is not None:
        return int((now - first).total_seconds() // schedule.timing.every) + 1, True
    count = 0
    for moment in schedule.timing.firings_after(first - timedelta(microseconds=1)):
        if moment > now:
            return count, True
        if count == MAX_COUNTED_TIMES:
            return count, False
        count += 1
    return count, True


def _apply_misfire(
    schedule: Schedule, times: list[datetime], now: datetime
) -> tuple[list[datetime], list[datetime], list[tuple[datetime, str]]]:
    """(late times to catch up, times to run as usual, times missed with the
    reason) under the misfire policy."""
    grace = timedelta(seconds=schedule.misfire_grace)
    late = [t for t in times if now - t > grace]
    on_time = [t for t in times if now - t <= grace]
    if not late:
        return [], on_time, []
    why = f"missed: due {{ago}} earlier, past the misfire grace; policy {schedule.misfire.value}"
    catching_up: list[datetime] = []
    if schedule.misfire == Misfire.LATEST and not on_time:
        on_time = late[-1:]
    elif schedule.misfire == Misfire.CATCH_UP:  # oldest first, within the limit
        catching_up = late[: schedule.catch_up_limit]
    run = set(catching_up) | set(on_time)
    missed = [(t, why.format(ago=_ago(now - t))) for t in late if t not in run]
    return catching_up, on_time, missed


def _catch_up(schedule: Schedule, times: list[datetime], active: bool) -> list[Firing]:
    """Every late time runs: together when overlaps are allowed, else in line."""
    if schedule.overlap == Overlap.ALLOW:
        return [Firing(t, Outcome.ENQUEUED, "catching up") for t in times]
    firings = []
    for moment in times:
        if not active:
            firings.append(Firing(moment, Outcome.ENQUEUED, "catching up"))
            active = True
        else:
            firings.append(Firing(moment, Outcome.PENDING, "catching up: after the run before"))
    return firings


def _apply_overlap(
    schedule: Schedule, chosen: list[datetime], active: bool, pending: bool, result: Plan
) -> list[Firing]:
    policy = schedule.overlap
    if policy == Overlap.ALLOW:
        return [Firing(t, Outcome.ENQUEUED) for t in chosen]
    firings: list[Firing] = []
    if policy == Overlap.REPLACE and len(chosen) > 1:
        firings += [Firing(t, Outcome.SKIPPED, "replaced by a newer run") for t in chosen[:-1]]
        chosen = chosen[-1:]
    for moment in chosen:
        if not active:
            firings.append(Firing(moment, Outcome.ENQUEUED))
            active = True
        elif policy == Overlap.FORBID:
            firings.append(Firing(moment, Outcome.SKIPPED, "the previous run was still active"))
        elif policy == Overlap.QUEUE and not pending:
            firings.append(Firing(moment, Outcome.PENDING, "waits for the previous run"))
            pending = True
        elif policy == Overlap.QUEUE:
            firings.append(Firing(moment, Outcome.SKIPPED, "a run already waits for the previous"))
        else:  # replace
            result.cancel_active = True
            firings.append(Firing(moment, Outcome.PENDING, "replaces the previous run"))
    return firings


def _ago(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d {seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    if seconds >= 60:
        return f"{seconds // 60}m {seconds % 60}s"
    return f"{seconds}s"
