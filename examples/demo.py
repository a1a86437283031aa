"""`make demo`: a real worker runs immediate, delayed, deduplicated and failing jobs,
a cron schedule, and a long backfill split into pieces, with a progress bar.

Runs on the embedded SQLite default (examples/demo.db, recreated each time):
enqueues jobs, starts `due worker` (with its scheduler) in a subprocess, shows
the backfill's progress as the heartbeats report it, then the jobs and the
schedule's runs, and stops the worker with SIGTERM (a graceful shutdown).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

import due

DATABASES = ("demo.db", "events.db")
for database in DATABASES:
    for leftover in (database, f"{database}-wal", f"{database}-shm"):
        if os.path.exists(leftover):
            os.remove(leftover)

from backfill import backfill_finished, create_events, plan_backfill  # noqa: E402
from demo_app import (  # noqa: E402 - the databases must be fresh before the app opens them
    app,
    build_report,
    flaky_export,
    send_reminder,
    send_welcome_email,
)

BACKFILL_ROWS = 60_000
BACKFILL_CHUNK = 10_000

console = Console()


def show(title: str) -> None:
    console.rule(title)
    for job in reversed([job for job in app.jobs(limit=50) if _is_one_off(job)]):
        when = job.run_at.strftime("%H:%M:%S")
        result = job.result if job.result is not None else (job.last_error or "")
        console.print(
            f"  job {job.id:>2}  {job.task.split('.')[-1]:<20} {job.queue:<8} "
            f"{job.state.value:<10} attempt {job.attempt}/{job.max_attempts}  due {when}  {result}",
            soft_wrap=True,
        )


def enqueue() -> due.Job:
    """The one-off jobs; returns the report, which the demo waits for."""
    send_welcome_email.enqueue(1)
    send_welcome_email.enqueue(2)
    report = build_report.enqueue("2026-11")
    flaky_export.enqueue()
    send_reminder.options(delay="2s", key="reminder:1").enqueue(1)
    again = send_reminder.options(delay="2s", key="reminder:1").enqueue(1)
    console.print(f"second reminder for user 1 deduplicated: {again.deduplicated} (job {again.id})")
    cancelled = send_reminder.options(delay="1h").enqueue(2)
    app.cancel(cancelled.id)
    return report


def _is_one_off(job: due.Job) -> bool:
    return job.schedule is None and job.parent_id is None


def _one_offs_pending() -> bool:
    active = app.jobs(state="queued") + app.jobs(state="running")
    return any(_is_one_off(job) for job in active)


def follow_backfill(parent: due.Job, timeout: float = 60.0) -> None:
    """Draw the backfill's progress from what the heartbeats wrote: one bar for the
    whole table (rows done in every piece), one per piece."""
    columns = (
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    deadline = time.monotonic() + timeout
    with Progress(*columns, console=console) as progress:
        total = progress.add_task("backfill (rows)", total=BACKFILL_ROWS)
        bars: dict[int, TaskID] = {}
        while time.monotonic() < deadline:
            pieces = sorted(app.jobs(parent=parent.id), key=lambda job: job.id)
            done = 0
            for piece in pieces:
                start, stop = piece.args
                rows = stop - start
                piece_done = rows if piece.state.value == "succeeded" else 0
                if piece.progress and piece.state.value != "succeeded":
                    piece_done = int(piece.progress["done"])
                done += piece_done
                if piece.id not in bars:
                    bars[piece.id] = progress.add_task(f"  ids {start}-{stop - 1}", total=rows)
                progress.update(bars[piece.id], completed=piece_done)
            progress.update(total, completed=done)
            if app.get(parent.id).state.value != "waiting" and pieces:
                break
            time.sleep(0.2)


def main() -> None:
    console.print(f"[bold]due demo[/bold] on {app.url}")
    console.print(f"migrations applied: {app.migrate()}")
    report = enqueue()
    create_events(BACKFILL_ROWS)
    backfill = plan_backfill.enqueue(chunk=BACKFILL_CHUNK)
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
            "-q",
            "backfill=3",
            "--log-level",
            "warning",  # the progress bars below tell the story
            "--grace",
            "5s",
        ],
    )
    try:
        done = app.wait(report.id, timeout="30s")  # woken by the job's end, no polling
        console.print(f"app.wait: job {done.id} {done.state}, returned {done.result}")
        console.rule("a backfill of 60,000 rows in 6 pieces, 3 at a time")
        follow_backfill(backfill)
        finished = app.jobs(task=backfill_finished.name)
        if finished:
            console.print(f"  completion job {finished[0].id}: {finished[0].result}")
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
