"""Schedulers in real worker processes: three on one PostgreSQL, the leader killed,
another paused past its lease; a schedule that cannot fire, on every backend."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg
import pytest

import due
from tests.helpers.database import plain_transaction
from tests.helpers.waiting import wait_until
from tests.helpers.workers import Workers

pytestmark = pytest.mark.slow
TTL = 3.0


def ticks(ledger: Path) -> list[tuple[float, int, float, int]]:
    """(scheduled_for, pid, started_at, job id) of every run of the every-second
    schedule."""
    if not ledger.exists():
        return []
    rows = []
    for line in ledger.read_text().splitlines():
        kind, job, scheduled_for, pid, at = line.split()
        if kind == "tick":
            rows.append((float(scheduled_for), int(pid), float(at), int(job)))
    return rows


def leader_pid(url: str) -> int | None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT holder FROM due_leases WHERE name = 'scheduler' AND expires_at > now()"
        ).fetchone()
    return int(row[0].split(":")[1]) if row else None


@pytest.mark.parametrize("via", ["direct", "pgbouncer"])
def test_every_scheduled_time_runs_once_through_kill_and_pause(
    postgres_url: str, tmp_path: Path, via: str, request: pytest.FixtureRequest
) -> None:
    # The workers connect directly, or through a transaction pooler; the test
    # reads the lease directly either way.
    url = postgres_url if via == "direct" else str(request.getfixturevalue("pgbouncer_url"))
    due.App(url).migrate()
    ledger = tmp_path / "ledger.txt"
    pool = Workers(url, ledger, tmp_path)
    options = ("--leader-ttl", f"{TTL}s", "--lease", "3s", "-q", "default=10")
    try:
        workers = {
            w.pid: w
            for w in (pool.start(*options, env={"DUE_TEST_SCHEDULE": "1"}) for _ in range(3))
        }
        wait_until(lambda: len(ticks(ledger)) >= 3, timeout=30, what="the schedule to tick")
        first = wait_until(lambda: leader_pid(postgres_url), what="a leader")
        workers[first].signal(signal.SIGKILL)
        killed_at = time.time()
        after_kill = wait_until(
            lambda: [t for t in ticks(ledger) if t[2] > killed_at + 0.05],
            timeout=30,
            what="the schedule to tick again",
        )[0]
        failover = after_kill[2] - killed_at
        print(f"\nfailover after SIGKILL of the leader: {failover:.2f}s (lease {TTL:g}s)")
        assert failover <= TTL + 2.0
        second = wait_until(lambda: (p := leader_pid(postgres_url)) != first and p, what="leader")
        workers[second].signal(signal.SIGSTOP)
        paused_at = time.time()
        wait_until(
            lambda: (p := leader_pid(postgres_url)) not in (first, second) and p,
            timeout=30,
            what="a third leader",
        )
        assert time.time() - paused_at <= TTL + 2.5
        workers[second].signal(signal.SIGCONT)  # the old leader wakes up, sure it still leads
        wait_until(  # it acts on its stale belief, if it would, before it learns
            lambda: "scheduler.not_leading" in workers[second].log(),
            timeout=30,
            what="the old leader to learn it no longer leads",
        )
        stop_at = time.time()
        for pid, worker in workers.items():
            if pid != first:
                worker.signal(signal.SIGTERM)
        for pid, worker in workers.items():
            if pid != first:
                assert worker.wait_exit(timeout=30) == 0
    finally:
        pool.stop_all()
    runs = [t for t in ticks(ledger) if t[0] <= stop_at - 2]
    moments = [t[0] for t in runs]
    jobs_of: dict[float, set[int]] = {}
    for moment, _pid, _at, job in runs:
        jobs_of.setdefault(moment, set()).add(job)
    assert all(len(jobs) == 1 for jobs in jobs_of.values()), f"two jobs for one time: {jobs_of}"
    # A job runs again only when the worker running it was killed or paused before
    # its end was written (at least once): the leader killed, the leader paused.
    ran_on: dict[int, int] = {}
    for _moment, pid, _at, job in sorted(runs, key=lambda run: run[2]):
        assert job not in ran_on or ran_on[job] in (first, second), f"job {job} ran twice"
        ran_on[job] = pid
    expected = set(range(int(min(moments)), int(max(moments)) + 1))
    assert {int(m) for m in moments} == expected, "a scheduled time did not run"
    with psycopg.connect(postgres_url) as conn:
        query = "SELECT outcome, count(*) FROM due_schedule_runs GROUP BY outcome"
        outcomes = dict(conn.execute(query).fetchall())
    assert set(outcomes) == {"enqueued"}, outcomes


def test_a_schedule_that_cannot_fire_stops_neither_the_worker_nor_the_others(
    app: due.App, workers: Workers, backend_url: str, tmp_path: Path
) -> None:
    """A row no `due` would write now (February 30th, as if by hand or by an older
    version), due since an hour: the worker starts, the broken schedule is marked
    and alerted, the every-second one ticks, and SIGTERM still exits 0."""
    app.add_schedule("broken", every="1h", task="stamp")
    earlier = "7200" if backend_url.startswith("sqlite") else "interval '2 hours'"
    spoiled = (
        "UPDATE due_schedules SET cron = '0 0 30 2 *', every = NULL, "
        f"next_fire_at = next_fire_at - {earlier} WHERE name = 'broken'"
    )
    with plain_transaction(backend_url) as conn:
        conn.execute(spoiled)
    worker = workers.start("--leader-ttl", "3s", env={"DUE_TEST_SCHEDULE": "1"})
    ledger = tmp_path / "ledger.txt"
    wait_until(lambda: len(ticks(ledger)) >= 3, timeout=30, what="the good schedule to tick")
    wait_until(lambda: "schedule.invalid" in worker.log(), timeout=10, what="the alert")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=30) == 0
    assert "never fires" in worker.log() and "scheduler.crashed" not in worker.log()
    (alert,) = [a for a in app.check() if a.subject == "schedule broken"]
    assert alert.kind == "schedule_invalid"
