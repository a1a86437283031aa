"""Workflows (issue 38): how soon is a step released, and what do steps cost?

    .venv/bin/python bench/workflows_bench.py [--backend sqlite|postgres|both]
                                              [--only latency,throughput,waiting]
                                              [--quick]

Every worker is a real `due worker` process (`--no-scheduler`, log level
warning), built from this module (its `app`, from DUE_WORKFLOWS_BENCH_URL).
Every figure comes from what the database shows (started_at, finished_at,
state), never from the client. Each step has its own database, dropped and
created again: PostgreSQL `due_bench_workflows_<step>[_variant]`, SQLite
`bench/work/db/workflows_<step>[_variant].db`. Every task is a no-op.

latency     release latency: from an upstream step's finished_at to its
            dependent's started_at, with --workers worker processes (`-c
            100` each) and nothing else to do. A chain of --chain-latency
            steps (each from the one before); a ladder of --rungs rungs,
            each 10 steps side by side after the previous rung's join, then
            a join after the 10: "fan-in" is a join's started_at minus the
            latest finished_at of its 10, "fan-out" each of the 10's
            started_at minus its join's finished_at. p50, p99, max ms
            (target: p99 <= 10 ms). started_at is when the claim's
            transaction began (PostgreSQL's now(); on SQLite the worker's
            clock as it claims), finished_at the same of the transaction
            that ended the upstream step and released its dependent: the
            figure includes that transaction's own time.
throughput  one worker (`-c 100`, as bench/due_bench.py's drain) runs, in
            turn (A B C, C B A, ...; --runs each), a chain of --chain-steps
            steps, a fan-out of --steps - 1 steps into one fan-in step, and
            the plain drain of --steps jobs of the same no-op task, each
            enqueued while the queue is paused, then resumed. Steps (jobs)
            per second from the first started_at to the last finished_at;
            the fan-out's as % of the plain drain's (target >= 50 %), and
            the CPU per step of each (worker; PostgreSQL's server); the
            fan-in step checked run once; the chain's release latency (p50,
            p99) at that length. Each run's rows are deleted (and, on
            PostgreSQL, vacuumed away) before the next.
waiting     one worker (`-c 100`) drains --drain no-op jobs, in a database
            that also holds --waiting steps waiting on upstream steps that
            never run (workflows of up to 10,000 steps: one step in a queue
            no worker serves, every other step after it, in the drained
            queue), and in one without them (same app, same worker
            settings). The two databases have a worker each, running
            throughout; drains alternate between them (A B, B A, ...),
            --runs each. jobs/s from the first started_at to the last
            finished_at, with / without (target: within 10 %); CPU per job.
            The waiting steps are checked still waiting at the end.

One JSON line per run on stdout, also appended to bench/results/results.jsonl,
then a table per backend with medians [min-max] over the runs and the ratios.
`--quick`: small sizes, one run each (a smoke run, seconds; its figures mean
nothing).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due
import run  # its tables' dash

URL_ENV = "DUE_WORKFLOWS_BENCH_URL"
STEPS = ("latency", "throughput", "waiting")
MAX_STEPS = 10_000  # due.workflows.MAX_STEPS: the most steps of one workflow
RUNG = 10
DASH = run.DASH


def make_app(url: str) -> due.App:
    """The benchmark's app: a no-op task in the drained queue, and one in a
    queue no worker of the benchmark serves (what waiting steps wait on)."""
    app = due.App(url)

    @app.task(name="noop")
    async def noop(n: int) -> None: ...

    @app.task(name="never", queue="never")
    async def never() -> None: ...

    return app


# The worker process imports this module by name and takes `app` from it.
if os.environ.get(URL_ENV):
    app = make_app(os.environ[URL_ENV])


# --------------------------------------------------------------------------- database


class Db:
    """The step's database, read from outside the workers (autocommit)."""

    def __init__(self, backend: str, name: str) -> None:
        self.backend = backend
        self.name = name
        if backend == "sqlite":
            path = common.fresh_sqlite_path(common.WORK_DIR / "db" / f"workflows_{name}.db")
            self.url = f"sqlite:///{path}"
            self.conn: Any = sqlite3.connect(path, timeout=30, isolation_level=None)
        else:
            import psycopg

            db = f"{common.DB_PREFIX}workflows_{name}"
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
        """PostgreSQL: the dead rows of deleted jobs gone and the planner's
        statistics fresh, as autovacuum leaves a live table (untimed)."""
        if self.backend == "postgres":
            for table in ("due_jobs", "due_workflow_edges", "due_workflows"):
                self.conn.execute(f"VACUUM ANALYZE {table}")
        else:
            self.conn.execute("ANALYZE")

    def close(self) -> None:
        self.app.close()
        self.conn.close()


def start_workers(db: Db, count: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    env = {URL_ENV: db.url, "PYTHONPATH": str(common.BENCH_DIR)}
    cmd = [
        sys.executable, "-m", "due", "worker", "--app", "workflows_bench:app",
        "-q", f"default={concurrency}", "--no-scheduler", "--log-level", "warning",
    ]  # fmt: skip
    log = common.WORK_DIR / "logs" / f"workflows-{db.backend}-{db.name}.log"
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


# --------------------------------------------------------------------------- the cases


def chain(db: Db, steps: int) -> int:
    flow = db.app.workflow("chain")
    noop = db.app.tasks.get("noop")
    previous: list[Any] = []
    for n in range(steps):
        previous = [flow.add(noop.request(n), name=f"c{n}", after=previous)]
    return flow.enqueue().id


def fan(db: Db, steps: int) -> int:
    """steps - 1 steps side by side, then one step after them all ("join")."""
    flow = db.app.workflow("fan")
    noop = db.app.tasks.get("noop")
    members = [flow.add(noop.request(n), name=f"m{n}") for n in range(steps - 1)]
    flow.add(noop.request(steps), name="join", after=members)
    return flow.enqueue().id


def ladder(db: Db, rungs: int) -> int:
    """Rungs of RUNG steps side by side, each rung after the previous rung's join."""
    flow = db.app.workflow("ladder")
    noop = db.app.tasks.get("noop")
    join: list[Any] = []
    for r in range(rungs):
        members = [flow.add(noop.request(i), name=f"r{r}-{i}", after=join) for i in range(RUNG)]
        join = [flow.add(noop.request(-1), name=f"join-{r}", after=members)]
    return flow.enqueue().id


def enqueue_paused(db: Db, make: Any, size: int) -> int:
    """A workflow (`make(db, size)`), enqueued while the queue is paused."""
    db.app.pause_queue("default")
    return int(make(db, size))


def plain_paused(db: Db, count: int) -> tuple[int, int]:
    """`count` jobs of the no-op task, enqueued while the queue is paused: ids first..last."""
    db.app.pause_queue("default")
    noop = db.app.tasks.get("noop")
    ids: list[int] = []
    for start in range(0, count, common.CHUNK):
        chunk = range(start, min(count, start + common.CHUNK))
        ids += [job.id for job in db.app.enqueue_many([noop.request(n) for n in chunk])]
    return ids[0], ids[-1]


def wait_workflow(db: Db, workflow: int, timeout: float) -> str:
    ended = f"SELECT state FROM due_workflows WHERE id = {workflow} AND state != 'running'"
    if not common.wait_until(lambda: bool(db.rows(ended)), timeout, 0.05):
        raise TimeoutError(f"{db.name}: workflow {workflow} did not end in {timeout:.0f} s")
    return str(db.scalar(ended))


def wait_done(db: Db, first: int, last: int, timeout: float) -> None:
    count = last - first + 1
    done = f"SELECT count(*) FROM due_jobs WHERE id BETWEEN {first} AND {last} AND state = "
    if not common.wait_until(lambda: db.scalar(done + "'succeeded'") >= count, timeout, 0.05):
        raise TimeoutError(f"{db.name}: not all of {count} jobs succeeded in {timeout:.0f} s")


def span(db: Db, where: str) -> tuple[int, float]:
    """How many jobs, and the seconds from the first started_at to the last finished_at."""
    count, first, last = db.rows(
        f"SELECT count(*), min({db.epoch('started_at')}), max({db.epoch('finished_at')}) "
        f"FROM due_jobs WHERE {where}"
    )[0]
    return int(count), float(last) - float(first)


def releases(db: Db, workflow: int) -> dict[int, tuple[str, float]]:
    """Each step with upstream steps: its name and its release latency in ms,
    its started_at minus the latest finished_at of its upstream steps."""
    found = db.rows(
        f"SELECT s.id, s.step_name, {db.epoch('s.started_at')}, max({db.epoch('u.finished_at')}) "
        "FROM due_workflow_edges AS e "
        "JOIN due_jobs AS s ON s.id = e.step_id JOIN due_jobs AS u ON u.id = e.upstream_id "
        f"WHERE s.workflow_id = {workflow} GROUP BY s.id, s.step_name, s.started_at"
    )
    return {int(job): (name, 1000 * (float(s) - float(u))) for job, name, s, u in found}


def forget(db: Db, workflow: int | None = None, ids: tuple[int, int] | None = None) -> None:
    """A run's rows deleted (then vacuumed away on PostgreSQL), untimed."""
    if workflow is not None:
        db.conn.execute(
            "DELETE FROM due_workflow_edges WHERE step_id IN "
            f"(SELECT id FROM due_jobs WHERE workflow_id = {workflow})"
        )
        db.conn.execute(f"DELETE FROM due_jobs WHERE workflow_id = {workflow}")
        db.conn.execute(f"DELETE FROM due_workflows WHERE id = {workflow}")
    if ids is not None:
        db.conn.execute(f"DELETE FROM due_jobs WHERE id BETWEEN {ids[0]} AND {ids[1]}")
    db.vacuum()


def quantiles(values: Sequence[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": None, "p99": None, "max": None}
    return {
        "p50": round(statistics.median(ordered), 2),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        "max": round(ordered[-1], 2),
        "n": len(ordered),
    }


# --------------------------------------------------------------------------- measures


def run_latency(db: Db, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    flow = enqueue_paused(db, chain, args.chain_latency)
    db.app.resume_queue("default")
    assert wait_workflow(db, flow, 600) == "succeeded"
    result["chain"] = quantiles([ms for _, ms in releases(db, flow).values()])
    forget(db, workflow=flow)
    flow = enqueue_paused(db, ladder, args.rungs)
    db.app.resume_queue("default")
    assert wait_workflow(db, flow, 600) == "succeeded"
    found = releases(db, flow).values()
    result["fan_in"] = quantiles([ms for name, ms in found if name.startswith("join-")])
    result["fan_out"] = quantiles([ms for name, ms in found if not name.startswith("join-")])
    forget(db, workflow=flow)
    return result


def run_chain(db: Db, steps: int) -> dict[str, Any]:
    flow = enqueue_paused(db, chain, steps)
    db.app.resume_queue("default")
    state = wait_workflow(db, flow, 60 + steps * 0.05)
    count, seconds = span(db, f"workflow_id = {flow}")
    latency = quantiles([ms for _, ms in releases(db, flow).values()])
    forget(db, workflow=flow)
    return {
        "steps": count,
        "state": state,
        "steps_per_s": round(count / seconds, 1),
        "seconds": round(seconds, 3),
        "release_ms_p50": latency["p50"],
        "release_ms_p99": latency["p99"],
    }


def run_fan(db: Db, steps: int, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    """steps/s of a fan-out into one fan-in step, and the CPU per step (as run_plain)."""
    flow = enqueue_paused(db, fan, steps)
    db.vacuum()
    cpu_meter = meter(db, worker)
    db.app.resume_queue("default")
    state = wait_workflow(db, flow, 60 + steps * 0.01)
    cpu = cpu_meter.per_job_us(steps)
    count, seconds = span(db, f"workflow_id = {flow}")
    (join,) = [ms for name, ms in releases(db, flow).values() if name == "join"]
    attempt = db.scalar(
        f"SELECT attempt FROM due_jobs WHERE workflow_id = {flow} AND step_name = 'join'"
    )
    forget(db, workflow=flow)
    return {
        "steps": count,
        "state": state,
        "steps_per_s": round(count / seconds, 1),
        "seconds": round(seconds, 3),
        "join_release_ms": round(join, 2),
        "join_attempt": int(attempt),
    } | cpu


def meter(db: Db, worker: subprocess.Popen[bytes]) -> common.CpuMeter:
    """CPU of the worker and (PostgreSQL) the server from now on."""
    server = common.postmaster_pid(db.url.rsplit("/", 1)[1]) if db.backend == "postgres" else None
    return common.CpuMeter(worker, server)


def run_plain(db: Db, jobs: int, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    """jobs/s of one plain drain, and the CPU per job of the worker and
    (PostgreSQL) the server, from the resume to the moment the driver sees
    the last job done."""
    first, last = plain_paused(db, jobs)
    db.vacuum()
    cpu_meter = meter(db, worker)
    db.app.resume_queue("default")
    wait_done(db, first, last, timeout=60 + jobs * 0.01)
    cpu = cpu_meter.per_job_us(jobs)
    count, seconds = span(db, f"id BETWEEN {first} AND {last}")
    forget(db, ids=(first, last))
    return {
        "jobs": count,
        "jobs_per_s": round(count / seconds, 1),
        "seconds": round(seconds, 3),
    } | cpu


def fill_waiting(db: Db, count: int) -> dict[str, Any]:
    """`count` steps waiting, in workflows of up to MAX_STEPS steps: one of
    the task no worker serves, every other after it."""
    started = time.monotonic()
    never, noop = db.app.tasks.get("never"), db.app.tasks.get("noop")
    left = count
    while left > 0:
        size = min(left, MAX_STEPS - 1)
        flow = db.app.workflow("held")
        blocker = flow.add(never.request(), name="blocker")
        for n in range(size):
            flow.add(noop.request(n), name=f"w{n}", after=[blocker])
        flow.enqueue()
        left -= size
    db.vacuum()
    if db.backend == "postgres":
        db.conn.execute("CHECKPOINT")
    return {"waiting": waiting_steps(db), "fill_s": round(time.monotonic() - started, 1)}


def waiting_steps(db: Db) -> int:
    return int(db.scalar("SELECT count(*) FROM due_jobs WHERE state = 'waiting'"))


# --------------------------------------------------------------------------- steps


def save(backend: str, step: str, **fields: Any) -> None:
    common.save({"bench": "workflows", "backend": backend, "step": step} | fields)


def step_latency(backend: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    db = Db(backend, "latency")
    workers: list[subprocess.Popen[bytes]] = []
    results = []
    try:
        workers = start_workers(db, args.workers, 100)
        for n in range(args.runs_latency):
            result = run_latency(db, args)
            save(
                backend, "latency", run=n, workers=args.workers, ts=round(time.time(), 3), **result
            )
            results.append(result)
    finally:
        stop_workers(workers)
        db.close()
    return results


def step_throughput(backend: str, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    db = Db(backend, "throughput")
    workers: list[subprocess.Popen[bytes]] = []
    cases = {
        "plain": lambda: run_plain(db, args.steps, workers[0]),
        "fan": lambda: run_fan(db, args.steps, workers[0]),
        "chain": lambda: run_chain(db, args.chain_steps),
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    try:
        workers = start_workers(db, 1, 100)
        order = list(cases)
        for n in range(args.runs):
            for name in order if n % 2 == 0 else order[::-1]:
                result = cases[name]()
                save(backend, "throughput", variant=name, run=n, ts=round(time.time(), 3), **result)
                results[name].append(result)
    finally:
        stop_workers(workers)
        db.close()
    return results


def step_waiting(backend: str, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    dbs: dict[str, Db] = {}
    workers: dict[str, subprocess.Popen[bytes]] = {}
    results: dict[str, list[dict[str, Any]]] = {"waiting": [], "empty": []}
    try:
        for name in results:
            dbs[name] = Db(backend, f"waiting_{name}")
            workers[name] = start_workers(dbs[name], 1, 100)[0]
        fill = fill_waiting(dbs["waiting"], args.waiting)
        save(backend, "waiting", **fill)
        order = list(results)
        for n in range(args.runs):
            for name in order if n % 2 == 0 else order[::-1]:
                result = run_plain(dbs[name], args.drain, workers[name])
                save(backend, "waiting", variant=name, run=n, ts=round(time.time(), 3), **result)
                results[name].append(result)
        held = dbs["waiting"]
        save(
            backend,
            "waiting",
            still_waiting=waiting_steps(held),
            blockers_queued=held.scalar(
                "SELECT count(*) FROM due_jobs WHERE task = 'never' AND state = 'queued'"
            ),
        )
    finally:
        stop_workers(list(workers.values()))
        for db in dbs.values():
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
    lines = [f"\n### Workflows, {backend}\n", "| measure | figure | target |", "|---|---|---|"]
    if "latency" in found:
        runs = found["latency"]
        for key, label in (
            ("chain", f"chain of {args.chain_latency}"),
            ("fan_in", f"fan-in, a join after {RUNG} ({args.rungs} rungs)"),
            ("fan_out", f"fan-out, {RUNG} after a join"),
        ):
            lines.append(
                f"| release latency, {label}, {args.workers} workers: ms p50 / p99 / max "
                f"({len(runs)} runs) | {spread([r[key]['p50'] for r in runs], 1)} / "
                f"{spread([r[key]['p99'] for r in runs], 1)} / "
                f"{max(r[key]['max'] for r in runs):,.1f} | p99 <= 10 |"
            )
    if "throughput" in found:
        runs = found["throughput"]
        plain = [r["jobs_per_s"] for r in runs["plain"]]
        fanned = [r["steps_per_s"] for r in runs["fan"]]
        chained = [r["steps_per_s"] for r in runs["chain"]]
        lines += [
            f"| plain drain of {args.steps:,} jobs, 1 worker: jobs/s ({len(plain)} runs) | "
            f"{spread(plain)} | |",
            f"| fan-out of {args.steps - 1:,} into 1: steps/s | {spread(fanned)} | |",
            f"| ... as % of the plain drain (medians) | "
            f"{100 * statistics.median(fanned) / statistics.median(plain):.0f} % | >= 50 % |",
            f"| ... the fan-in step's release, ms | "
            f"{spread([r['join_release_ms'] for r in runs['fan']], 1)} | |",
            f"| ... the fan-in step ran once (attempt 1, workflow succeeded) | "
            f"{all(r['join_attempt'] == 1 and r['state'] == 'succeeded' for r in runs['fan'])} "
            "| True |",
        ]
        for meter_name in ("worker_cpu_us", "server_cpu_us"):
            for side, label in (("plain", "plain"), ("fan", "fan-out")):
                cpu = [r[meter_name] for r in runs[side] if r.get(meter_name) is not None]
                if cpu:
                    what = meter_name.replace("_", " ")
                    lines.append(f"| ... {label}, {what}/job (step) | {spread(cpu)} | |")
        lines += [
            f"| chain of {args.chain_steps:,}: steps/s | {spread(chained)} | |",
            f"| ... as % of the plain drain (medians) | "
            f"{100 * statistics.median(chained) / statistics.median(plain):.1f} % | |",
            f"| ... release latency, ms p50 / p99 | "
            f"{spread([r['release_ms_p50'] for r in runs['chain']], 1)} / "
            f"{spread([r['release_ms_p99'] for r in runs['chain']], 1)} | |",
        ]
    if "waiting" in found:
        runs = found["waiting"]
        with_a = [r["jobs_per_s"] for r in runs["waiting"]]
        with_b = [r["jobs_per_s"] for r in runs["empty"]]
        ratio = statistics.median(with_a) / statistics.median(with_b)
        lines += [
            f"| drain of {args.drain:,} beside {args.waiting:,} waiting steps: jobs/s "
            f"({len(with_a)} runs) | {spread(with_a)} | |",
            f"| ... without them, jobs/s | {spread(with_b)} | |",
            f"| ... ratio of medians | {ratio:.2f} | >= 0.90 |",
        ]
        for side in ("waiting", "empty"):
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
    parser.add_argument("--workers", type=int, default=2, help="worker processes of latency")
    parser.add_argument("--chain-latency", type=int, default=1_000)
    parser.add_argument("--rungs", type=int, default=100)
    parser.add_argument("--runs-latency", type=int, default=2)
    parser.add_argument(
        "--steps", type=int, default=10_000, help="of the fan-out and the drain (<= 10,000)"
    )
    parser.add_argument("--chain-steps", type=int, default=10_000, help="of the chain (<= 10,000)")
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument(
        "--runs", type=int, default=3, help="runs of each side of throughput, waiting"
    )
    args = parser.parse_args()
    if args.quick:
        args.chain_latency, args.rungs, args.runs_latency = 50, 5, 1
        args.steps, args.chain_steps, args.waiting, args.drain, args.runs = (
            200,
            200,
            2_000,
            1_000,
            1,
        )
    if not (2 <= args.steps <= MAX_STEPS and 2 <= args.chain_steps <= MAX_STEPS):
        parser.error(f"--steps and --chain-steps must be 2 to {MAX_STEPS}")
    steps = [step for step in args.only.split(",") if step]
    if unknown := set(steps) - set(STEPS):
        parser.error(f"unknown steps: {', '.join(sorted(unknown))}")
    common.exit_on_sigterm()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        found: dict[str, Any] = {}
        for step in steps:
            if step == "latency":
                found[step] = step_latency(backend, args)
            elif step == "throughput":
                found[step] = step_throughput(backend, args)
            else:
                found[step] = step_waiting(backend, args)
        print(report(backend, found, args), flush=True)


if __name__ == "__main__":
    main()
