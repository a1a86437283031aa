"""`make demo`: a real worker runs immediate, delayed, deduplicated and failing jobs.

Runs on the embedded SQLite default (examples/demo.db, recreated each time):
enqueues jobs, starts `due worker` in a subprocess, shows the jobs as they
move, then stops the worker with SIGTERM (a graceful shutdown).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from rich.console import Console

DATABASE = "demo.db"
for leftover in (DATABASE, f"{DATABASE}-wal", f"{DATABASE}-shm"):
    if os.path.exists(leftover):
        os.remove(leftover)

from demo_app import (  # noqa: E402 - the database must be fresh before the app opens it
    app,
    build_report,
    flaky_export,
    send_reminder,
    send_welcome_email,
)

console = Console()


def show(title: str) -> None:
    console.rule(title)
    for job in reversed([job for job in app.jobs(limit=50) if job.schedule is None]):
        when = job.run_at.strftime("%H:%M:%S")
        result = job.result if job.result is not None else (job.last_error or "")
        console.print(
            f"  job {job.id:>2}  {job.task.split('.')[-1]:<20} {job.queue:<8} "
            f"{job.state.value:<10} attempt {job.attempt}/{job.max_attempts}  due {when}  {result}",
            soft_wrap=True,
        )


def enqueue() -> None:
    send_welcome_email.enqueue(1)
    send_welcome_email.enqueue(2)
    build_report.enqueue("2026-11")
    flaky_export.enqueue()
    send_reminder.enqueue(1, delay="2s", key="reminder:1")
    again = send_reminder.enqueue(1, delay="2s", key="reminder:1")
    console.print(f"second reminder for user 1 deduplicated: {again.deduplicated} (job {again.id})")
    cancelled = send_reminder.enqueue(2, delay="1h")
    app.cancel(cancelled.id)


def _one_offs_pending() -> bool:
    active = app.jobs(state="queued") + app.jobs(state="running")
    return any(job.schedule is None for job in active)


def main() -> None:
    console.print(f"[bold]due demo[/bold] on {app.url}")
    console.print(f"migrations applied: {app.migrate()}")
    enqueue()
    show("enqueued")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "due",
            "--app",
            "demo_app:app",
            "worker",
            "-q",
            "emails=4",
            "-q",
            "reports=2",
            "--grace",
            "5s",
        ],
    )
    try:
        # The enqueued jobs finish within a few seconds; the schedule keeps firing.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _one_offs_pending():
            time.sleep(0.2)
        time.sleep(4.5)  # a few more runs of the schedule
        show("after the worker ran them")
        console.rule("schedules")
        for overview in app.schedules():
            stored = overview.stored
            console.print(
                f"  {stored.name}: {stored.schedule.timing.describe()}, next at "
                f"{stored.next_fire_at:%H:%M:%S}, last run {overview.last_run_state}",
                soft_wrap=True,
            )
            for run in reversed(app.schedule_runs(stored.name, limit=4)):
                console.print(f"    {run.scheduled_for:%H:%M:%S} {run.outcome} job {run.job_id}")
    finally:
        worker.send_signal(signal.SIGTERM)
        console.print(f"worker stopped with exit code {worker.wait(timeout=30)}")
    app.close()


if __name__ == "__main__":
    main()
