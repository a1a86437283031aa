"""The Django layer (issue 39): what does going through `django.tasks` cost?

    .venv-newest/bin/python bench/django_bench.py [--backend sqlite|postgres|both]
                                                  [--only enqueue,drain] [--quick]

Runs on the newest Python, with Django (`scripts/newest-venv` makes the
environment). The project is bench/django_project: one database, due as the
task backend, the same no-op function as a Django task (`benchjobs.tasks.noop`)
and as a plain due task (`benchjobs.plain_noop`). A fresh database per backend:
PostgreSQL `due_bench_django`, SQLite `bench/work/db/django.sqlite3` (a run
with DUE_BENCH_SCRATCH keeps its own, as every benchmark's).

enqueue  --enqueue jobs enqueued one at a time, in this process, through
         Django's API (`noop.enqueue()`: validate_task, the job, a TaskResult,
         the task_enqueued signal) and through due's (`plain_noop.enqueue()`),
         in turn (D P, P D, ...; --runs each). Jobs per second from the first
         job's created_at to the last one's, as the database stamped them;
         Django's time per job against due's (target: at most 15 % more).
drain    --drain jobs of each kind, enqueued with no worker running, then one
         real worker (`python -m due --django benchsite worker -c 100
         --no-scheduler`, its queue only) drains them; in turn, --runs each.
         Jobs per second from the first started_at to the last finished_at;
         Django's against due's (target: equal within noise). The Django
         jobs run through the layer: Django's signals (with Django's own
         logging receivers), the connection hygiene of a request, the
         TaskResult built for them.

One JSON line per run (bench/results/results.jsonl), then a table per
backend with medians [min-max] over the runs and the ratios. `--quick`: small
sizes, one run each (a smoke run; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
PROJECT = BENCH / "django_project"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402

PG_DB = f"{common.DB_PREFIX}django"
SQLITE_PATH = common.WORK_DIR / "db" / "django.sqlite3"


def database_setting(backend: str) -> str:
    if backend == "postgres":
        common.recreate_pg_db(PG_DB)
        return f"postgres:{PG_DB}"
    SQLITE_PATH.parent.mkdir(parents=True, exist_ok=True)
    common.fresh_sqlite_path(SQLITE_PATH)
    return str(SQLITE_PATH)


def environment(database: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DUE_DJANGO_BENCH_DB"] = database
    env["DJANGO_SETTINGS_MODULE"] = "benchsite"
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT), env.get("PYTHONPATH", "")])
    return env


def setup(database: str) -> Any:
    """Django set up in this process on `database`, migrated; the backend's App."""
    os.environ.update({k: v for k, v in environment(database).items() if k != "PYTHONPATH"})
    sys.path.insert(0, str(PROJECT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from due.contrib.django import due_app

    return due_app()


def span(app: Any, task: str, first: str, last: str) -> tuple[int, float]:
    """(jobs, seconds from the earliest `first` to the latest `last`) of a task's jobs."""
    jobs = app.jobs(task=task, limit=1_000_000)
    starts = [getattr(job, first) for job in jobs]
    ends = [getattr(job, last) for job in jobs]
    return len(jobs), (max(ends) - min(starts)).total_seconds()


def clear(app: Any, database: str) -> None:
    if database.startswith("postgres:"):
        common.pg_execute(PG_DB, "DELETE FROM due_jobs")
        common.pg_execute(PG_DB, "VACUUM due_jobs")
    else:
        with sqlite3.connect(database) as conn:
            conn.execute("DELETE FROM due_jobs")


def enqueue_run(app: Any, kind: str, n: int) -> dict[str, Any]:
    from benchjobs.tasks import noop, plain_noop

    name = "benchjobs.tasks.noop" if kind == "django" else "benchjobs.plain_noop"
    enqueue = noop.enqueue if kind == "django" else plain_noop.enqueue
    for _ in range(n):
        enqueue()
    count, seconds = span(app, name, "created_at", "created_at")
    return {"jobs": count, "seconds": seconds, "jobs_per_s": common.jobs_per_s(count - 1, seconds)}


def drain_run(app: Any, database: str, kind: str, n: int) -> dict[str, Any]:
    from benchjobs.tasks import noop, plain_noop

    if kind == "django":
        for _ in range(n):
            noop.enqueue()
        name, queue = "benchjobs.tasks.noop", "default"
    else:
        app.enqueue_many([plain_noop.request() for _ in range(n)])
        name, queue = "benchjobs.plain_noop", "plain"
    log = common.WORK_DIR / f"django_drain_{kind}.log"
    command = [
        sys.executable, "-m", "due", "--django", "benchsite", "worker",
        "-q", f"{queue}=100", "--no-scheduler", "--log-level", "warning",
    ]  # fmt: skip
    worker = common.spawn(command, log, environment(database))
    try:
        common.wait_until(
            lambda: (
                not app.jobs(task=name, state="queued", limit=1)
                and not app.jobs(task=name, state="running", limit=1)
            ),
            timeout=600,
        )
    finally:
        common.stop_due_worker(worker)
    failed = app.jobs(task=name, state="failed", limit=10)
    assert not failed, f"{len(failed)} jobs failed: {failed[0].last_error}"
    count, seconds = span(app, name, "started_at", "finished_at")
    return {"jobs": count, "seconds": seconds, "jobs_per_s": common.jobs_per_s(count, seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--only", default="enqueue,drain")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--enqueue", type=int, default=5_000)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--in-process", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.enqueue, args.drain = 1, 200, 500
    if args.in_process:  # one backend, in a process of its own (Django is set up once)
        one_backend(args.in_process, args)
        return
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        forwarded = [a for a in sys.argv[1:] if not a.startswith("--backend")]
        subprocess.run([sys.executable, __file__, *forwarded, "--in-process", backend], check=True)


def one_backend(backend: str, args: argparse.Namespace) -> None:
    database = database_setting(backend)
    app = setup(database)
    steps = args.only.split(",")
    figures: dict[tuple[str, str], list[float]] = {}
    for run in range(args.runs):
        order = ("django", "due") if run % 2 == 0 else ("due", "django")
        for step in ("enqueue", "drain"):
            if step not in steps:
                continue
            for kind in order:
                clear(app, database)
                n = args.enqueue if step == "enqueue" else args.drain
                result = (
                    enqueue_run(app, kind, n)
                    if step == "enqueue"
                    else drain_run(app, database, kind, n)
                )
                record = {
                    "bench": "django",
                    "backend": backend,
                    "step": step,
                    "kind": kind,
                    "run": run,
                    "at": time.time(),
                    **result,
                }
                common.save(record)
                figures.setdefault((step, kind), []).append(result["jobs_per_s"])
    report(backend, figures)


def report(backend: str, figures: dict[tuple[str, str], list[float]]) -> None:
    print(f"\n{backend}: jobs/s, median [min-max] over the runs")
    for step in ("enqueue", "drain"):
        django, plain = figures.get((step, "django")), figures.get((step, "due"))
        if not django or not plain:
            continue
        d, p = common.spread(django), common.spread(plain)
        ratio = d["median"] / p["median"] if d["median"] and p["median"] else None
        print(
            f"  {step:8} django {d['median']:,.0f} [{d['min']:,.0f}-{d['max']:,.0f}]"
            f"  due {p['median']:,.0f} [{p['min']:,.0f}-{p['max']:,.0f}]"
            f"  django/due {ratio:.2f}"
            + (f" (cost per job +{(1 / ratio - 1) * 100:.0f} %)" if ratio else "")
        )


if __name__ == "__main__":
    main()
