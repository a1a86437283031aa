"""Millions of timers: do jobs scheduled for later slow down today's work?

    .venv/bin/python bench/timers_bench.py [--backend sqlite|postgres|both]
                                           [--timers 10000000] [--finished 1000000]
                                           [--drain 20000] [--runs 3]

Each backend is measured in two databases: one nearly empty, one with
--timers jobs due over the next month at priorities above the measured jobs'
(the worst case: a claim that ordered by priority first would walk past all of
them) and --finished succeeded jobs, written by SQL (COPY-like, one statement),
not through enqueue. One worker process each (`due worker`, concurrency 100,
no scheduler) runs throughout; the runs alternate between the two databases,
each measure --runs times in each, and the medians are reported:

drain     --drain no-op jobs enqueued while the queue is paused, then resumed:
          jobs / (last acknowledgement as the database recorded it - resume),
          and the CPU per job of the worker and (PostgreSQL) of the server
pickup    200 jobs enqueued one by one 20 ms apart to the idle worker:
          started_at - created_at (database times), p50 and p99 in ms
late      200 jobs enqueued due 0.5 to 2.5 s later: started_at - run_at,
          p50 and p99 in ms (the issue's bar: p99 within 50 ms)
enqueue   2,000 single `task.enqueue` calls, jobs/s

One JSON line per result on stdout, also appended to bench/results/results.jsonl,
and a table at the end. The worker's concurrency and log level can be changed
with DUE_BENCH_CONCURRENCY and DUE_BENCH_LOG_LEVEL (bench/shards_bench.py starts
its workers through this module too).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due

TASK = "noop"

SQLITE_TIMERS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
INSERT INTO due_jobs (task, queue, priority, state, payload, run_at, timer, max_attempts,
                      created_at)
SELECT 'noop', 'default', 1 + i % 10, 'queued', '{{"args":[],"kwargs":{{}}}}',
       {now} + 3600 + (i % 2592000), 1, 3, {now}
FROM n
"""
SQLITE_FINISHED = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
INSERT INTO due_jobs (task, queue, state, payload, run_at, attempt, max_attempts,
                      created_at, started_at, finished_at)
SELECT 'noop', 'default', 'succeeded', '{{"args":[],"kwargs":{{}}}}',
       {now} - 3600 + (i % 3000), 1, 3, {now} - 3601, {now} - 3600 + (i % 3000),
       {now} - 3600 + (i % 3000)
FROM n
"""
POSTGRES_TIMERS = """
INSERT INTO due_jobs (task, queue, priority, state, payload, run_at, timer, max_attempts,
                      created_at)
SELECT 'noop', 'default', 1 + i % 10, 'queued', '{{"args":[],"kwargs":{{}}}}'::jsonb,
       to_timestamp({now} + 3600 + (i % 2592000)), true, 3, to_timestamp({now})
FROM generate_series(1, {count}) AS i
"""
POSTGRES_FINISHED = """
INSERT INTO due_jobs (task, queue, state, payload, run_at, attempt, max_attempts,
                      created_at, started_at, finished_at)
SELECT 'noop', 'default', 'succeeded', '{{"args":[],"kwargs":{{}}}}'::jsonb,
       to_timestamp({now} - 3600 + (i % 3000)), 1, 3, to_timestamp({now} - 3601),
       to_timestamp({now} - 3600 + (i % 3000)), to_timestamp({now} - 3600 + (i % 3000))
FROM generate_series(1, {count}) AS i
"""


def make_app(url: str) -> tuple[due.App, due.Task[Any, Any]]:
    app = due.App(url)

    @app.task(name=TASK)
    async def noop(n: int) -> None: ...

    return app, noop


# The worker process imports this module by name and takes `app` from it.
if os.environ.get("DUE_TIMERS_BENCH_URL"):
    app, _ = make_app(os.environ["DUE_TIMERS_BENCH_URL"])


def fill(backend: str, url: str, timers: int, finished: int) -> float:
    """Seconds taken to write the rows, analyze them and put them on disk."""
    started = time.monotonic()
    now = time.time()
    if backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(url.split(":///", 1)[1])
        with conn:
            conn.execute(SQLITE_TIMERS.format(count=timers, now=now))
            conn.execute(SQLITE_FINISHED.format(count=finished, now=now))
        conn.execute("ANALYZE")
        conn.close()
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(POSTGRES_TIMERS.format(count=timers, now=now))
            conn.execute(POSTGRES_FINISHED.format(count=finished, now=now))
            conn.execute("VACUUM ANALYZE due_jobs")
            # The fill and its vacuum leave gigabytes of dirty pages and WAL; the
            # checkpoint they trigger, and the kernel writing them back, ran into
            # the first minutes of measuring (2026-12-04: the drain at 0.74x the
            # empty table right after the fill, 0.96x on the same databases ten
            # minutes later). A live table of timers was not written a minute ago.
            try:
                conn.execute("CHECKPOINT")
            except psycopg.errors.InsufficientPrivilege:
                print("no CHECKPOINT (needs pg_checkpoint): the fill may overlap", file=sys.stderr)
    os.sync()
    return time.monotonic() - started


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    return common.spawn_due_worker(
        "timers_bench",
        "DUE_TIMERS_BENCH_URL",
        url,
        log,
        "-c",
        os.environ.get("DUE_BENCH_CONCURRENCY", "100"),
        "--no-scheduler",
        "--log-level",
        os.environ.get("DUE_BENCH_LOG_LEVEL", "warning"),
    )


stop_worker = common.stop_due_worker

PHASES = ("empty", "timers")


def wait_ended(app: due.App, ids: list[int], timeout: float = 300.0) -> list[due.Job]:
    deadline = time.monotonic() + timeout
    last = max(ids)
    while time.monotonic() < deadline:
        job = app.get(last)
        if job.state is due.JobState.SUCCEEDED:
            jobs = [app.get(job_id) for job_id in ids]
            if all(j.state is due.JobState.SUCCEEDED for j in jobs):
                return jobs
        time.sleep(0.05)
    raise TimeoutError(f"jobs {ids[0]}..{last} did not all succeed within {timeout:.0f} s")


def measure_drain(url: str, app: due.App, noop: due.Task[Any, Any], count: int) -> dict[str, Any]:
    app.pause_queue("default")
    ids = [job.id for job in app.enqueue_many([noop.request(n) for n in range(count)])]
    time.sleep(0.5)  # the worker is idle, waiting on the paused queue
    resumed = datetime.now(UTC)
    app.resume_queue("default")
    deadline = time.monotonic() + 300
    with DrainWatch(url, ids[0], ids[-1]) as watch:
        while watch.still_open():
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    ended = ended_between(url, ids[0], ids[-1])
    if ended[0] < count:
        raise TimeoutError(f"{count - ended[0]} of {count} jobs did not end in 300 s")
    seconds = ended[1] - resumed.timestamp()
    return {"jobs_per_s": count / seconds, "seconds": seconds, "autovacuum": watch.autovacuum}


def measure_drain_and_cpu(
    url: str, app: due.App, noop: due.Task[Any, Any], count: int, meters: tuple[int, int | None]
) -> dict[str, Any]:
    """The drain, and the CPU each job cost the worker and the PostgreSQL server
    (`meters`: their pids): the machine's noise moves a rate far more than a cost."""
    worker, server = meters
    before = [common.cpu_seconds(common.process_tree(pid)) for pid in (worker, server) if pid]
    drained = measure_drain(url, app, noop, count)
    after = [common.cpu_seconds(common.process_tree(pid)) for pid in (worker, server) if pid]
    for name, start, end in zip(("worker_cpu_us", "server_cpu_us"), before, after, strict=False):
        drained[name] = (end - start) / count * 1e6
    return drained


class DrainWatch:
    """Whether any of the drained jobs first..last is still open, asked every
    50 ms while they drain, and whether an autovacuum worked on `due_jobs` (of
    any database of the server: the two phases share its cores) meanwhile.

    On PostgreSQL, one connection asks whether the claim index or the running
    index holds a job: the bench's queue has no other (its timers wait in their
    own index). Counting the succeeded rows of the range instead read every row
    version of it: 10,000 buffers and 80 ms of the server a look (2026-12-05),
    about 15 us of the server's CPU per drained job, beside the drain. One
    cycle of autovacuum on a table of 1,000,000 timers cost the server 0.6 to
    0.8 s of CPU (0.45 s of it the ANALYZE's sample of 30,000 rows), as much as
    a third of a 20,000-job drain's: `autovacuum` says which runs met one."""

    def __init__(self, url: str, first: int, last: int) -> None:
        self.url, self.first, self.last = url, first, last
        self.autovacuum: bool | None = None  # unknown on SQLite, which has none
        self._conn: Any = None

    def __enter__(self) -> DrainWatch:
        if not self.url.startswith("sqlite"):
            import psycopg

            self._conn = psycopg.connect(self.url, autocommit=True)
            self.autovacuum = False
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            self._conn.close()

    def still_open(self) -> bool:
        if self._conn is None:
            return ended_between(self.url, self.first, self.last)[0] < self.last - self.first + 1
        row = self._conn.execute(OPEN_JOBS).fetchone()
        self.autovacuum = self.autovacuum or bool(row[1])
        return bool(row[0])


OPEN_JOBS = """
SELECT EXISTS (SELECT 1 FROM due_jobs
               WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL
                 AND queue = 'default')
    OR EXISTS (SELECT 1 FROM due_jobs WHERE state = 'running'),
       EXISTS (SELECT 1 FROM pg_stat_activity
               WHERE backend_type = 'autovacuum worker' AND query LIKE '%due_jobs%')
"""


def ended_between(url: str, first: int, last: int) -> tuple[int, float]:
    """How many of the jobs first..last succeeded, and the epoch of the last
    acknowledgement (as the database recorded it)."""
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url.split(":///", 1)[1], timeout=10)
        try:
            count, at = conn.execute(
                "SELECT count(*), coalesce(max(finished_at), 0) FROM due_jobs "
                "WHERE id BETWEEN ? AND ? AND state = 'succeeded'",
                (first, last),
            ).fetchone()
        finally:
            conn.close()
        return int(count), float(at)
    import psycopg

    with psycopg.connect(url) as conn:
        count, at = conn.execute(
            "SELECT count(*), coalesce(extract(epoch FROM max(finished_at)), 0)::float8 "
            "FROM due_jobs WHERE id BETWEEN %s AND %s AND state = 'succeeded'",
            (first, last),
        ).fetchone()  # type: ignore[misc]
    return int(count), float(at)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "max_ms": 1000 * ordered[-1],
    }


def measure_pickup(app: due.App, noop: due.Task[Any, Any], count: int = 200) -> dict[str, Any]:
    ids = []
    for n in range(count):
        ids.append(noop.enqueue(n).id)
        time.sleep(0.02)
    jobs = wait_ended(app, ids)
    return percentiles(
        [(job.started_at - job.created_at).total_seconds() for job in jobs if job.started_at]
    )


def measure_lateness(app: due.App, noop: due.Task[Any, Any], count: int = 200) -> dict[str, Any]:
    base = datetime.now(UTC) + timedelta(seconds=0.5)
    ids = [
        job.id
        for job in app.enqueue_many(
            [
                noop.options(run_at=base + timedelta(seconds=2 * n / count)).request(n)
                for n in range(count)
            ]
        )
    ]
    jobs = wait_ended(app, ids)
    return percentiles(
        [(job.started_at - job.run_at).total_seconds() for job in jobs if job.started_at]
    )


def measure_enqueue(noop: due.Task[Any, Any], count: int = 2000) -> dict[str, Any]:
    started = time.perf_counter()
    for n in range(count):
        noop.enqueue(n)
    return {"jobs_per_s": count / (time.perf_counter() - started)}


def measure(
    url: str, app: due.App, noop: due.Task[Any, Any], drain: int, meters: tuple[int, int | None]
) -> dict[str, dict[str, Any]]:
    results = {
        "drain": measure_drain_and_cpu(url, app, noop, drain, meters),
        "pickup": measure_pickup(app, noop),
        "late": measure_lateness(app, noop),
        "enqueue": measure_enqueue(noop),
    }
    return results


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, dict[str, list[dict]]]:
    """Two databases side by side, one kept empty and one filled, each with its
    worker; the runs alternate between them, so the machine's drift over the
    minutes of a run (up to 2x here) falls on both phases alike."""
    setups: dict[str, tuple[str, due.App, due.Task[Any, Any]]] = {}
    meters: dict[str, tuple[int, int | None]] = {}
    workers: list[subprocess.Popen[bytes]] = []
    table: dict[str, dict[str, list[dict]]] = {}
    try:
        for phase in PHASES:
            url = common.fresh_due_url(backend, f"timers_{phase}")
            app, noop = make_app(url)
            setups[phase] = (url, app, noop)
            app.migrate()
            if phase == "timers":
                seconds = fill(backend, url, args.timers, args.finished)
                common.save(
                    {
                        "bench": "timers",
                        "backend": backend,
                        "fill_s": seconds,
                        "timers": args.timers,
                        "finished": args.finished,
                    }
                )
            log = common.WORK_DIR / "logs" / f"timers-{backend}-{phase}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            workers.append(start_worker(url, log))
            server = (
                common.postmaster_pid(f"{common.DB_PREFIX}due_timers_{phase}")
                if backend == "postgres"
                else None
            )
            meters[phase] = (workers[-1].pid, server)
        time.sleep(2)
        for run in range(args.runs):
            for phase in PHASES if run % 2 == 0 else PHASES[::-1]:
                url, app, noop = setups[phase]
                for name, values in measure(url, app, noop, args.drain, meters[phase]).items():
                    rec = {
                        "bench": "timers",
                        "backend": backend,
                        "phase": phase,
                        "measure": name,
                        "run": run,
                        **values,
                    }
                    common.save(rec)
                    table.setdefault(name, {}).setdefault(phase, []).append(values)
    finally:
        for worker in workers:
            stop_worker(worker)
        for _, app, _ in setups.values():
            app.close()
    return table


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def report(backend: str, table: dict[str, dict[str, list[dict]]], args: argparse.Namespace) -> str:
    lines = [
        f"\n### {backend}: empty table vs {args.timers:,} timers + {args.finished:,} finished "
        f"(medians of {args.runs})\n",
        "| measure | empty | with timers | ratio |",
        "|---|---|---|---|",
    ]
    rows = [("drain, jobs/s", ("drain", "jobs_per_s"))]
    rows += [("drain, worker CPU us/job", ("drain", "worker_cpu_us"))]
    drains = [run for runs in table["drain"].values() for run in runs]
    if all("server_cpu_us" in run for run in drains):  # not for a server elsewhere
        rows += [("drain, server CPU us/job", ("drain", "server_cpu_us"))]
    for name, key in (
        *rows,
        ("pickup p50 ms", ("pickup", "p50_ms")),
        ("pickup p99 ms", ("pickup", "p99_ms")),
        ("delayed job lateness p50 ms", ("late", "p50_ms")),
        ("delayed job lateness p99 ms", ("late", "p99_ms")),
        ("single enqueue, jobs/s", ("enqueue", "jobs_per_s")),
    ):
        measure_name, field = key
        empty = median_of(table[measure_name]["empty"], field)
        full = median_of(table[measure_name]["timers"], field)
        ratio = f"{full / empty:.2f}" if empty else "-"  # a reading below the clock's tick
        lines.append(f"| {name} | {empty:,.1f} | {full:,.1f} | {ratio} |")
    if all(run.get("autovacuum") is not None for run in drains):
        lines += autovacuum_rows(table["drain"])
    return "\n".join(lines)


def autovacuum_rows(drains: dict[str, list[dict]]) -> list[str]:
    """How many drains of each phase met an autovacuum of due_jobs (of either
    database), and the rates of those that did not: a cycle on the filled table
    cost the server as much as a third of a drain's CPU, and fell on whichever
    drain ran then."""
    met = {phase: sum(1 for run in drains[phase] if run["autovacuum"]) for phase in PHASES}
    lines = [
        f"| drains that met an autovacuum of due_jobs | {met['empty']} of "
        f"{len(drains['empty'])} | {met['timers']} of {len(drains['timers'])} | |"
    ]
    clear = {p: [r["jobs_per_s"] for r in drains[p] if not r["autovacuum"]] for p in PHASES}
    if clear["empty"] and clear["timers"]:
        empty, full = statistics.median(clear["empty"]), statistics.median(clear["timers"])
        lines.append(
            f"| drain, jobs/s, runs that met none | {empty:,.1f} | {full:,.1f} "
            f"| {full / empty:.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--timers", type=int, default=10_000_000)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    reports = [report(backend, run_backend(backend, args), args) for backend in backends]
    print("\n".join(reports))


if __name__ == "__main__":
    main()
