"""Actions taken by hand (a cancel, a retry, a pause, a run triggered now), who
took them, and on what: the history the dashboard shows beside a job's
attempts and a schedule's runs. Pruned with the failed jobs."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from due.core.records import Action
from due.store.backend import Backend


def record(
    db: Backend,
    action: str,
    by: str,
    *,
    job_id: int | None = None,
    schedule: str | None = None,
    queue: str | None = None,
) -> None:
    """Note that `by` did `action` to a job, a schedule or a queue, now."""
    with db.transaction() as tx:
        tx.run(
            "record_action",
            {
                "now": tx.now,
                "action": action,
                "actor": by,
                "job_id": job_id,
                "schedule": schedule,
                "queue": queue,
            },
        )


def history(
    db: Backend,
    *,
    job_id: int | None = None,
    schedule: str | None = None,
    queue: str | None = None,
    limit: int = 100,
) -> list[Action]:
    """The latest `limit` actions on a job, a schedule or a queue, oldest first."""
    with db.transaction(read=True) as tx:
        rows = tx.run(
            "list_actions",
            {"job_id": job_id, "schedule": schedule, "queue": queue, "limit": limit},
        )
    return [
        Action(row["at"], row["action"], row["actor"], row["job_id"], row["schedule"], row["queue"])
        for row in reversed(rows)
    ]


def throughput(db: Backend, until: datetime, minutes: int) -> dict[str, list[int]]:
    """Per queue: the jobs that ended in each of the `minutes` whole minutes up to
    the one `until` is in (oldest first)."""
    start = until.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    with db.transaction(read=True) as tx:
        rows = tx.run("queue_throughput", {"since": start})
    per_queue: dict[str, list[int]] = defaultdict(lambda: [0] * minutes)
    for row in rows:
        index = int((row["minute"] - start) / timedelta(minutes=1))
        if 0 <= index < minutes:
            per_queue[row["queue"]][index] += int(row["ended"])
    return dict(per_queue)
