"""Limits (issue 37): do they hold under real workers, and what do they cost?

    .venv/bin/python bench/limits_bench.py [--backend sqlite|postgres|both]
                                           [--only rate,concurrency,backlog,unbound]
                                           [--quick]

Every worker is a real `due worker` process (`--no-scheduler`, log level
warning), built from this module (its `app`, from DUE_LIMITS_BENCH_URL). Every
figure comes from what the database shows (started_at, finished_at, state),
never from the client. Each step has its own database, dropped and created
again: PostgreSQL `due_bench_limits_<step>[_variant]`, SQLite
`bench/work/db/limits_<step>[_variant].db`.

rate         `app.limit("rate", rate="1000/s")`, a no-op task naming it, 3 worker
             processes (`-c 100` each), --rate-jobs jobs enqueued while the queue
             is paused, then resumed. Achieved starts per second in the steady
             state (the starts from first start + 1 s to last start - 1 s,
             counted over whole multiples of 1,000 starts: the limiter starts
             in bursts, and start k + 1,000 comes a second or more after start
             k), as a percentage of 1,000 (target >= 95 %); how long after
             start k's second start k + 1,000 comes (p50, p90, max ms: what
             the rate loses); and the most starts in any sliding window of one
             second, exactly, over the sorted start instants ([s, s + 1) from
             each start s; must be <= 1,000; the closed window [s, s + 1] is
             reported beside it). --workers changes the 3 (also of concurrency).
concurrency  `app.limit("cap", concurrency=50)`, a task sleeping 0.2 s, 3
             workers with `-c 40` each (120 slots), --concurrency-jobs jobs.
             The running jobs as the database counts them (`state =
             'running'`, what the limit counts), sampled every 20 ms by a
             query during the steady state (first start + 1 s to last start
             - 1 s): median, min, max; the most running whenever a claim of
             them commits, recorded by a trigger on due_jobs (the bound: must
             be <= 50; the target is that it keeps 50 running); and the most
             overlapping [started_at, finished_at) intervals, which on
             PostgreSQL exceeds what ran at once (started_at is the claim
             transaction's start, before it waits for the key's lock: the
             trigger also records that transaction's age at its commit).
backlog      one worker (`-c 100`, as bench/due_bench.py's drain) drains
             --drain no-op jobs of an unlimited task, in a database whose
             queue also holds --waiting limited jobs waiting for their limit
             (`rate="1/h"`: put in the queue by SQL, then claimed by that
             worker, which sets all but one waiting, as any claim does), and
             in one without them (same app, same worker settings). The two
             databases have a worker each, running throughout; runs
             alternate between them (A B, B A, ...), --runs each. jobs/s
             from the first started_at to the last finished_at of the drained
             jobs, enqueued while the queue was paused, then resumed; then
             deleted (and, on PostgreSQL, vacuumed away) before the next run.
             The waiting jobs are checked still waiting at the end.
unbound      the same drain, of a task naming `app.limit("wide",
             concurrency=100000)` (a limit that never binds) against the
             same task in an app declaring no limit at all, interleaved the
             same way. Target for both ratios: within 10 %.

One JSON line per run on stdout, also appended to bench/results/results.jsonl,
then a table per backend with medians [min-max] over the runs and the ratios.
`--quick`: small sizes, one run each (a smoke run, seconds; its figures mean
nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due
import run  # its tables' dash

URL_ENV = "DUE_LIMITS_BENCH_URL"
PLAIN_ENV = "DUE_LIMITS_BENCH_PLAIN"  # "1": an app that declares no limit at all
RATE = 1000
CONCURRENCY = 50
SLEEP_S = 0.2
WIDE = 100_000
STEPS = ("rate", "concurrency", "backlog", "unbound")
DASH = run.DASH


def make_app(url: str, *, plain: bool = False) -> due.App:
    """The benchmark's app: every limit and task of every step, or (`plain`)
    only the unlimited tasks of an app without limits."""
    app = due.App(url)

    @app.task(name="free")
    async def free(n: int) -> None: ...

    if plain:
        return app
    app.limit("rate", rate=f"{RATE}/s")
    app.limit("cap", concurrency=CONCURRENCY)
    app.limit("held", rate="1/h")
    app.limit("wide", concurrency=WIDE)

    @app.task(name="rated", limits=["rate"])
    async def rated(n: int) -> None: ...

    @app.task(name="capped", limits=["cap"])
    async def capped(n: int) -> None:
        await asyncio.sleep(SLEEP_S)

    @app.task(name="held", limits=["held"])
    async def held(n: int) -> None: ...

    @app.task(name="wide", limits=["wide"])
    async def wide(n: int) -> None: ...

    return app


# The worker process imports this module by name and takes `app` from it.
if os.environ.get(URL_ENV):
    app = make_app(os.environ[URL_ENV], plain=os.environ.get(PLAIN_ENV) == "1")


# --------------------------------------------------------------------------- database


class Db:
    """The step's database, read from outside the workers (autocommit)."""

    def __init__(self, backend: str, name: str) -> None:
        self.backend = backend
        self.name = name
        if backend == "sqlite":
            path = common.fresh_sqlite_path(common.WORK_DIR / "db" / f"limits_{name}.db")
            self.url = f"sqlite:///{path}"
            self.conn: Any = sqlite3.connect(path, timeout=30, isolation_level=None)
        else:
            import psycopg

            db = f"{common.DB_PREFIX}limits_{name}"
            common.recreate_pg_db(db)
            self.url = common.pg_url(db)
            self.conn = psycopg.connect(self.url, autocommit=True)
        self.app = make_app(self.url)
        self.app.migrate()

    def epoch(self, column: str) -> str:
        if self.backend == "sqlite":
            return column
        return f"extract(epoch FROM {column})::float8"

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql).fetchall())

    def scalar(self, sql: str) -> Any:
        return self.rows(sql)[0][0]

    def vacuum(self) -> None:
        """PostgreSQL: the dead rows of deleted or moved jobs gone and the
        planner's statistics fresh, as autovacuum leaves a live table (untimed)."""
        if self.backend == "postgres":
            self.conn.execute("VACUUM ANALYZE due_jobs")
        else:
            self.conn.execute("ANALYZE")

    def close(self) -> None:
        self.app.close()
        self.conn.close()


def start_workers(
    db: Db, count: int, concurrency: int, *, plain: bool = False
) -> list[subprocess.Popen[bytes]]:
    env = {URL_ENV: db.url, "PYTHONPATH": str(common.BENCH_DIR), PLAIN_ENV: "1" if plain else ""}
    cmd = [
        sys.executable, "-m", "due", "worker", "--app", "limits_bench:app",
        "-c", str(concurrency), "--no-scheduler", "--log-level", "warning",
    ]  # fmt: skip
    log = common.WORK_DIR / "logs" / f"limits-{db.backend}-{db.name}.log"
    procs = [common.spawn(cmd, log, env) for _ in range(count)]
    ready = common.wait_until(
        lambda: db.scalar("SELECT count(*) FROM due_workers WHERE state = 'running'") >= count,
        timeout=60,
        abort=lambda: any(p.poll() is not None for p in procs),
    )
    if not ready:
        stop_workers(procs)
        raise RuntimeError(f"{count} workers did not start on {db.name}: see {log}")
    return procs


def stop_workers(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        common.stop_due_worker(proc)


def enqueue_paused(db: Db, task: str, count: int) -> tuple[int, int]:
    """`count` jobs of `task`, enqueued while the queue is paused: ids first..last."""
    db.app.pause_queue("default")
    task_obj = db.app.tasks.get(task)
    ids: list[int] = []
    for start in range(0, count, common.CHUNK):
        chunk = range(start, min(count, start + common.CHUNK))
        ids += [job.id for job in db.app.enqueue_many([task_obj.request(n) for n in chunk])]
    return ids[0], ids[-1]


def wait_done(db: Db, first: int, last: int, timeout: float) -> None:
    count = last - first + 1
    done = f"SELECT count(*) FROM due_jobs WHERE id BETWEEN {first} AND {last} AND state = "
    if not common.wait_until(lambda: db.scalar(done + "'succeeded'") >= count, timeout, 0.1):
        raise TimeoutError(f"{db.name}: not all of {count} jobs succeeded in {timeout:.0f} s")


def times(db: Db, first: int, last: int) -> list[tuple[float, float]]:
    """(started_at, finished_at) of jobs first..last, as the database recorded them."""
    sql = (
        f"SELECT {db.epoch('started_at')}, {db.epoch('finished_at')} FROM due_jobs "
        f"WHERE id BETWEEN {first} AND {last} ORDER BY started_at"
    )
    return [(float(s), float(f)) for s, f in db.rows(sql)]


# --------------------------------------------------------------------------- measures


def max_in_window(starts: Sequence[float], width: float, *, closed: bool = False) -> int:
    """The most of the sorted instants in any window [t, t + width) (or closed
    [t, t + width]): exact, since a busiest window can always be slid right to
    begin at an instant."""
    most = 0
    for i, s in enumerate(starts):
        end = (bisect.bisect_right if closed else bisect.bisect_left)(starts, s + width)
        most = max(most, end - i)
    return most


def max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals [start, end) open at once (an end at a start's instant first)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def steady(starts: Sequence[float]) -> tuple[float, float]:
    """The steady state: from the first start + 1 s to the last start - 1 s
    (the whole span when that leaves less than a second: --quick)."""
    lo, hi = starts[0] + 1.0, starts[-1] - 1.0
    return (lo, hi) if hi - lo >= 1.0 else (starts[0], starts[-1])


def run_rate(db: Db, jobs: int) -> dict[str, Any]:
    first, last = enqueue_paused(db, "rated", jobs)
    db.app.resume_queue("default")
    wait_done(db, first, last, timeout=60 + 3 * jobs / RATE)
    starts = sorted(s for s, _ in times(db, first, last))
    lo, hi = steady(starts)
    i, end = bisect.bisect_left(starts, lo), bisect.bisect_left(starts, hi)
    # Whole multiples of RATE starts, from the first start of the steady state:
    # the limiter's pattern repeats every RATE starts (start k + RATE comes a
    # second or more after start k), so this counts whole periods, where a
    # window of fixed length would cut a burst at either end.
    j = i + (end - 1 - i) // RATE * RATE
    per_s = (j - i) / (starts[j] - starts[i]) if j > i else None
    window_per_s = (end - i) / (hi - lo)
    # What the rate loses: how long after start k's second is over start
    # k + RATE comes (0 for a limiter that starts the next job the moment the
    # window lets it).
    lags = sorted(1000 * (starts[k + RATE] - starts[k] - 1.0) for k in range(i, end - RATE))
    return {
        "jobs": jobs,
        "starts_per_s": round(per_s, 1) if per_s else None,
        "pct_of_limit": round(100 * per_s / RATE, 1) if per_s else None,
        "window_per_s": round(window_per_s, 1),
        "overall_per_s": round(len(starts) / (starts[-1] - starts[0]), 1),
        "lag_ms_p50": round(statistics.median(lags), 1) if lags else None,
        "lag_ms_p90": round(lags[int(0.9 * (len(lags) - 1))], 1) if lags else None,
        "lag_ms_max": round(lags[-1], 1) if lags else None,
        "max_in_1s": max_in_window(starts, 1.0),
        "max_in_1s_closed": max_in_window(starts, 1.0, closed=True),
        "steady_s": round(hi - lo, 2),
        "ok": max_in_window(starts, 1.0) <= RATE,
    }


# Every claim of a capped job records, as it commits, how many capped jobs the
# database then holds running (its own included, and the ends not yet
# committed): the limit's invariant, read at the only moments the count grows.
# On PostgreSQL a deferred trigger runs at the claim's commit, while the claim
# still holds the limit's key (no other claim can start one meanwhile); on
# SQLite the claim holds the one write lock throughout. On PostgreSQL each
# also records how long its transaction had run (now() is its start, and the
# claim's started_at): the jobs' [started_at, finished_at) intervals overlap
# more than ever ran at once by about that much.
POSTGRES_SEEN = """
CREATE TABLE bench_running_seen (running integer NOT NULL, age_ms float8);
CREATE FUNCTION bench_count_running() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_running_seen
    SELECT count(*), 1000 * extract(epoch FROM clock_timestamp() - now())
    FROM due_jobs WHERE state = 'running' AND task = 'capped';
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER bench_running AFTER UPDATE OF state ON due_jobs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.state = 'running' AND NEW.task = 'capped')
    EXECUTE FUNCTION bench_count_running();
"""
SQLITE_SEEN = """
CREATE TABLE bench_running_seen (running INTEGER NOT NULL, age_ms REAL);
CREATE TRIGGER bench_running AFTER UPDATE OF state ON due_jobs
    WHEN NEW.state = 'running' AND NEW.task = 'capped'
BEGIN
    INSERT INTO bench_running_seen (running)
    SELECT count(*) FROM due_jobs WHERE state = 'running' AND task = 'capped';
END;
"""


def watch_claims(db: Db) -> None:
    if db.backend == "sqlite":
        db.conn.executescript(SQLITE_SEEN)
    else:
        db.conn.execute(POSTGRES_SEEN)


def run_concurrency(db: Db, jobs: int) -> dict[str, Any]:
    first, last = enqueue_paused(db, "capped", jobs)
    db.conn.execute("DELETE FROM bench_running_seen")
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    reader = Db.__new__(Db)  # a connection of its own for the sampler's thread
    reader.backend, reader.name = db.backend, db.name
    if db.backend == "sqlite":
        reader.conn = sqlite3.connect(
            db.url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
        )
    else:
        import psycopg

        reader.conn = psycopg.connect(db.url, autocommit=True)
    running = (
        f"SELECT {reader.epoch('CURRENT_TIMESTAMP') if db.backend == 'postgres' else 'NULL'}, "
        f"count(*) FROM due_jobs WHERE state = 'running' AND id BETWEEN {first} AND {last}"
    )

    def sample() -> None:
        while not stop.is_set():
            at, count = reader.rows(running)[0]
            samples.append((float(at) if at is not None else time.time(), int(count)))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        db.app.resume_queue("default")
        wait_done(db, first, last, timeout=60 + 3 * jobs * SLEEP_S / CONCURRENCY)
    finally:
        stop.set()
        sampler.join()
        reader.conn.close()
    intervals = times(db, first, last)
    starts = sorted(s for s, _ in intervals)
    lo, hi = steady(starts)
    counts = [count for at, count in samples if lo <= at <= hi]
    most = max_overlap(intervals)
    at_claims = db.scalar("SELECT max(running) FROM bench_running_seen")
    ages = sorted(a for (a,) in db.rows("SELECT age_ms FROM bench_running_seen") if a is not None)
    return {
        "jobs": jobs,
        "running_median": statistics.median(counts) if counts else None,
        "running_min": min(counts) if counts else None,
        "running_max": max(counts) if counts else None,
        "samples": len(counts),
        "sampled_max_ever": max(count for _, count in samples),
        "max_running_at_claims": at_claims,
        "max_running_ever": most,
        "claim_age_ms_p50": round(statistics.median(ages), 1) if ages else None,
        "claim_age_ms_max": round(ages[-1], 1) if ages else None,
        "jobs_per_s": round(len(starts) / (max(f for _, f in intervals) - starts[0]), 1),
        "ideal_jobs_per_s": CONCURRENCY / SLEEP_S,
        # How long a job holds its slot as the database counts it (claim to
        # acknowledgement): the body's 0.2 s, and the rest is the worker's.
        "held_s_mean": round(statistics.fmean(f - s for s, f in intervals), 4),
        "steady_s": round(hi - lo, 2),
        "ok": at_claims <= CONCURRENCY,
    }


def drain(db: Db, task: str, jobs: int, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    """jobs/s of one drain, from the first start to the last acknowledgement
    (database times), and the CPU per job of the worker and (PostgreSQL) the
    server, from the resume to the moment the driver sees the last job done;
    its jobs are deleted afterwards."""
    first, last = enqueue_paused(db, task, jobs)
    db.vacuum()
    server = common.postmaster_pid(db.url.rsplit("/", 1)[1]) if db.backend == "postgres" else None
    meter = common.CpuMeter(worker, server)
    db.app.resume_queue("default")
    wait_done(db, first, last, timeout=300)
    cpu = meter.per_job_us(jobs)
    intervals = times(db, first, last)
    seconds = max(f for _, f in intervals) - min(s for s, _ in intervals)
    db.conn.execute(f"DELETE FROM due_jobs WHERE id BETWEEN {first} AND {last}")
    db.vacuum()
    rate = {"jobs": jobs, "jobs_per_s": round(jobs / seconds, 1), "seconds": round(seconds, 3)}
    return rate | cpu


def fill_waiting(db: Db, count: int) -> dict[str, Any]:
    """`count` jobs of the task limited to one start an hour, put in the queue by
    SQL (as enqueue_many writes them), then claimed by the running worker: one
    starts, the others are set waiting by the claim itself."""
    started = time.monotonic()
    now = time.time()
    if db.backend == "sqlite":
        db.conn.execute(
            f"""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
            INSERT INTO due_jobs (task, queue, state, payload, run_at, max_attempts,
                                  created_at, limits)
            SELECT 'held', 'default', 'queued', '{{"args":[' || i || '],"kwargs":{{}}}}', {now}, 3,
                   {now}, '[["held", ""]]'
            FROM n
            """
        )
    else:
        db.conn.execute(
            f"""
            INSERT INTO due_jobs (task, queue, state, payload, run_at, max_attempts,
                                  created_at, limits)
            SELECT 'held', 'default', 'queued', jsonb_build_object('args', jsonb_build_array(i),
                   'kwargs', '{{}}'::jsonb), to_timestamp({now}), 3, to_timestamp({now}),
                   '[["held", ""]]'::jsonb
            FROM generate_series(1, {count}) AS i
            """
        )
    waiting = "SELECT count(*) FROM due_jobs WHERE task = 'held' AND limit_wait IS NOT NULL"
    # Slow on PostgreSQL: 100,000 took 287 s on 2026-12-05 (about 200 set
    # waiting per claim, 1.7 such claims a second), 7 s on SQLite.
    if not common.wait_until(lambda: db.scalar(waiting) >= count - 1, 1800, 0.2):
        raise TimeoutError(f"{db.name}: the worker did not set {count - 1} jobs waiting")
    db.vacuum()
    if db.backend == "postgres":
        db.conn.execute("CHECKPOINT")
    return {"waiting": db.scalar(waiting), "fill_s": round(time.monotonic() - started, 1)}


def run_pair(
    backend: str,
    step: str,
    variants: dict[str, tuple[str, bool]],
    args: argparse.Namespace,
) -> dict[str, list[dict[str, Any]]]:
    """Two databases with a worker each; drains alternate between them.
    `variants`: name -> (task drained, plain app)."""
    dbs: dict[str, Db] = {}
    workers: dict[str, subprocess.Popen[bytes]] = {}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    try:
        for name, (_, plain) in variants.items():
            dbs[name] = Db(backend, f"{step}_{name}")
            workers[name] = start_workers(dbs[name], 1, 100, plain=plain)[0]
        if step == "backlog":
            fill = fill_waiting(dbs["waiting"], args.waiting)
            common.save({"bench": "limits", "backend": backend, "step": step, **fill})
        order = list(variants)
        for run in range(args.runs):
            for name in order if run % 2 == 0 else order[::-1]:
                result = drain(dbs[name], variants[name][0], args.drain, workers[name])
                rec = {"bench": "limits", "backend": backend, "step": step, "variant": name}
                common.save(rec | {"run": run, "ts": round(time.time(), 3)} | result)
                results[name].append(result)
        if step == "backlog":
            still = dbs["waiting"].scalar(
                "SELECT count(*) FROM due_jobs WHERE task = 'held' AND limit_wait IS NOT NULL"
            )
            ran = dbs["waiting"].scalar(
                "SELECT count(*) FROM due_jobs WHERE task = 'held' AND state = 'succeeded'"
            )
            common.save(
                {"bench": "limits", "backend": backend, "step": step, "still_waiting": still}
                | {"held_succeeded": ran}
            )
    finally:
        stop_workers(list(workers.values()))
        for db in dbs.values():
            db.close()
    return results


def run_repeated(backend: str, step: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    db = Db(backend, step)
    workers: list[subprocess.Popen[bytes]] = []
    results = []
    try:
        if step == "concurrency":
            watch_claims(db)
        workers = start_workers(db, args.workers, 100 if step == "rate" else 40)
        for run in range(args.runs_limits):
            if step == "rate":
                result = run_rate(db, args.rate_jobs)
            else:
                result = run_concurrency(db, args.concurrency_jobs)
            rec = {"bench": "limits", "backend": backend, "step": step, "run": run}
            common.save(rec | {"ts": round(time.time(), 3)} | result)
            results.append(result)
    finally:
        stop_workers(workers)
        db.close()
    return results


# --------------------------------------------------------------------------- report


def spread(values: Sequence[float], digits: int = 0) -> str:
    fmt = f"{{:,.{digits}f}}"
    if len(values) == 1:
        return fmt.format(values[0])
    return (
        f"{fmt.format(statistics.median(values))} "
        f"[{fmt.format(min(values))}{DASH}{fmt.format(max(values))}]"
    )


def report(backend: str, found: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [f"\n### Limits, {backend}\n", "| measure | figure | target |", "|---|---|---|"]
    if "rate" in found:
        runs = found["rate"]
        lines += [
            f"| rate 1000/s, {args.workers} workers: steady starts/s ({len(runs)} runs) | "
            f"{spread([r['starts_per_s'] for r in runs])} | |",
            f"| ... as % of 1,000 | {spread([r['pct_of_limit'] for r in runs], 1)} | >= 95 % |",
            f"| ... start k + 1,000 after start k's second, ms p50 / p90 / max | "
            f"{spread([r['lag_ms_p50'] for r in runs], 1)} / "
            f"{spread([r['lag_ms_p90'] for r in runs], 1)} / "
            f"{max(r['lag_ms_max'] for r in runs):,.1f} | |",
            f"| ... most starts in any 1 s window [s, s+1) | "
            f"{max(r['max_in_1s'] for r in runs):,} (closed [s, s+1]: "
            f"{max(r['max_in_1s_closed'] for r in runs):,}) | <= 1,000 |",
        ]
    if "concurrency" in found:
        runs = found["concurrency"]
        lines += [
            f"| concurrency 50, {args.workers} workers x 40, 0.2 s jobs: running, median of "
            f"samples ({len(runs)} runs) | {spread([r['running_median'] for r in runs], 1)} | 50 |",
            f"| ... min / max of samples | {min(r['running_min'] for r in runs)} / "
            f"{max(r['running_max'] for r in runs)} | |",
            f"| ... most running as any claim committed | "
            f"{max(r['max_running_at_claims'] for r in runs)} | <= 50 |",
            f"| ... most overlapping [started_at, finished_at) | "
            f"{max(r['max_running_ever'] for r in runs)} | |",
        ]
        if all(r.get("claim_age_ms_p50") is not None for r in runs):
            lines += [
                f"| ... a claim's transaction at its commit, ms p50 / max | "
                f"{spread([r['claim_age_ms_p50'] for r in runs], 1)} / "
                f"{max(r['claim_age_ms_max'] for r in runs):,.1f} | |",
            ]
        lines += [
            f"| ... jobs/s (ideal 250) | {spread([r['jobs_per_s'] for r in runs], 1)} | |",
            f"| ... a slot held per job, started_at to finished_at, mean s | "
            f"{spread([r['held_s_mean'] for r in runs], 3)} | 0.200 |",
        ]
    for step, a, b, label in (
        ("backlog", "waiting", "empty", "drain, with / without waiting limited jobs"),
        ("unbound", "wide", "none", "drain, limit that never binds / no limits"),
    ):
        if step not in found:
            continue
        runs = found[step]
        with_a = [r["jobs_per_s"] for r in runs[a]]
        with_b = [r["jobs_per_s"] for r in runs[b]]
        ratio = statistics.median(with_a) / statistics.median(with_b)
        lines += [
            f"| {label}: {a}, jobs/s ({len(with_a)} runs) | {spread(with_a)} | |",
            f"| ... {b}, jobs/s | {spread(with_b)} | |",
            f"| ... ratio of medians | {ratio:.2f} | >= 0.90 |",
        ]
        for side in (a, b):
            for meter in ("worker_cpu_us", "server_cpu_us"):
                cpu = [r[meter] for r in runs[side] if r.get(meter) is not None]
                if cpu:
                    lines.append(f"| ... {side}, {meter.replace('_', ' ')}/job | {spread(cpu)} | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--only", default=",".join(STEPS), help="steps, comma-separated")
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each")
    parser.add_argument("--rate-jobs", type=int, default=10_000)
    parser.add_argument("--concurrency-jobs", type=int, default=3_000)
    parser.add_argument("--runs-limits", type=int, default=3, help="runs of rate, concurrency")
    parser.add_argument(
        "--workers", type=int, default=3, help="worker processes of rate, concurrency"
    )
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5, help="runs of each side of backlog, unbound")
    args = parser.parse_args()
    if args.quick:
        args.rate_jobs, args.concurrency_jobs, args.runs_limits = 2_500, 500, 1
        args.waiting, args.drain, args.runs = 2_000, 1_000, 1
    steps = [step for step in args.only.split(",") if step]
    if unknown := set(steps) - set(STEPS):
        parser.error(f"unknown steps: {', '.join(sorted(unknown))}")
    common.exit_on_sigterm()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        found: dict[str, Any] = {}
        for step in steps:
            if step in ("rate", "concurrency"):
                found[step] = run_repeated(backend, step, args)
            elif step == "backlog":
                variants = {"waiting": ("free", False), "empty": ("free", False)}
                found[step] = run_pair(backend, step, variants, args)
            else:
                variants = {"wide": ("wide", False), "none": ("free", True)}
                found[step] = run_pair(backend, step, variants, args)
        print(report(backend, found, args), flush=True)


if __name__ == "__main__":
    main()
