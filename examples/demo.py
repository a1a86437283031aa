"""`make demo`: a real worker runs immediate, delayed, deduplicated and failing jobs,
a cron schedule, and a long backfill split into pieces, with a progress bar; the
dashboard shows it all in a browser.

Runs on the embedded SQLite default (examples/demo.db, recreated each time):
enqueues jobs, starts `due worker` (with its scheduler) and `due dashboard` in
subprocesses, shows the backfill's progress as the heartbeats report it, then
the jobs and the schedule's runs, and keeps the worker and the dashboard
running until Ctrl-C (SIGTERM to both: a graceful shutdown). With `--once` (or
DUE_DEMO_ONCE=1) it stops them as soon as the story is told.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

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

ONCE = "--once" in sys.argv[1:] or os.environ.get("DUE_DEMO_ONCE") == "1"
DASHBOARD_PORT = 8080
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


def free_port(preferred: int) -> int:
    """`preferred` if nothing listens there, else any free port."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred))
        except OSError:
            probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_dashboard() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port(DASHBOARD_PORT)
    command = [sys.executable, "-m", "due", "--app", "demo_app:app", "dashboard"]
    dashboard = subprocess.Popen([*command, "--port", str(port)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and dashboard.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    return dashboard, url


def wait_for_ctrl_c(url: str) -> None:
    console.rule("the dashboard")
    console.print(f"dashboard: {url}  (the worker and the scheduler run on; Ctrl-C stops them)")
    # Ctrl-C, or SIGTERM from whatever started the demo: stop the children gracefully.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        console.print()


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
    dashboard, url = start_dashboard()
    console.print(f"dashboard: {url}")
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
        if not ONCE:
            wait_for_ctrl_c(url)
    finally:
        for process in (worker, dashboard):
            process.send_signal(signal.SIGTERM)
        console.print(f"worker stopped with exit code {worker.wait(timeout=30)}")
        console.print(f"dashboard stopped with exit code {dashboard.wait(timeout=30)}")
    app.close()


if __name__ == "__main__":
    main()
