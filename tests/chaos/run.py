"""A chaos run: a real deployment on this machine, attacked while it works.

    .venv/bin/python -m tests.chaos.run --backend postgres --seconds 300 --rate 0.5

Starts worker processes (each with its scheduler) on one database, enqueues a
steady mix of work for `--seconds` — immediate, delayed, failing at random,
long with safe points (some longer than the grace), checkpointed, pieces under
a parent, values no store can hold, handlers that raise SystemExit or
KeyboardInterrupt, and four every-second schedules, one per overlap policy;
beside it jobs under concurrency, per-key and rate limits,
and workflows (chains, fan-out/fan-in) an operator cancels or retries now and
then (flow_load.py) — while faults land at random
(faults.py), then lets the deployment drain and prints the verdict
(verdict.py, flow_verdict.py): the rows that must be zero, and how fast it
recovered. The verdict is also written as JSON (`--out`). `make chaos` runs
it on both stores.

On PostgreSQL it runs on a cluster of its own, started for the run and
removed after it (tests/helpers/private_postgres.py): its faults restart that
server and end its sessions, never the machine's shared one, which other test
runs use meanwhile.

The load lasts `--seconds`, and goes on (OVERTIME at most) until the run has
done what it is there for: every kind of fault has landed, and the worker an
hour ahead has had its chance (on PostgreSQL it ran an attempt; on SQLite it
refused to start). A short run on a loaded machine needs that.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

import due
from tests.chaos import chaos_app
from tests.chaos.deployment import Deployment
from tests.chaos.faults import POSTGRES_FAULTS, SQLITE_FAULTS, Injector
from tests.chaos.flow_load import FlowLoad
from tests.chaos.flow_verdict import Action
from tests.chaos.verdict import Verdict, judge, read_ledger
from tests.helpers.private_postgres import PrivatePostgres, private_cluster
from tests.helpers.proxy import FreezableProxy, freezable_proxy
from tests.helpers.waiting import wait_until

LEDGER_TABLE = (
    "CREATE TABLE chaos_ledger (job_id bigint NOT NULL, token bigint NOT NULL, "
    "pid integer NOT NULL, detail text NOT NULL)"
)
STALLED_AFTER = 60.0
"""Seconds the drain waits without any unfinished job finishing before it stops."""
DRAIN_LIMIT = 1800.0
OVERTIME = 120.0
"""Seconds the load may go on past its length for the run to do what it is there for."""
CHECK_EVERY = 1.0
"""Seconds between two looks at what the run has done, once its length has passed."""
SKEW_REFUSAL = "clock is 3600s ahead"
"""What the worker an hour ahead logs when it refuses to start (SQLite)."""


def run(
    backend: str,
    url: str,
    folder: Path,
    *,
    seconds: float,
    rate: float,
    workers: int = 3,
    kinds: list[str] | None = None,
    seed: int = 1,
    burst: int = 0,
    server: PrivatePostgres | None = None,
    overtime: float = OVERTIME,
) -> Verdict:
    """`server`: the cluster of the run's own that `url` is on (PostgreSQL), for
    the faults that restart a server or end its sessions."""
    if server is not None and urlsplit(url).port != server.port:
        raise ValueError(f"{url} is not on the run's own cluster (port {server.port})")
    folder.mkdir(parents=True, exist_ok=True)
    with due.App(url) as app:
        app.migrate()
        _create_ledger_table(url)
    ledger = folder / "ledger.txt"
    deployment = Deployment(url, folder, workers + 1, ledger)
    deployment.skew(workers)  # one more worker, its wall clock an hour ahead
    chosen = kinds or (POSTGRES_FAULTS if backend == "postgres" else SQLITE_FAULTS)
    if "clock_step" in chosen and backend != "postgres":
        raise ValueError("clock_step is PostgreSQL's: on SQLite every process has the host's clock")
    stepped = min(1, workers - 1)
    if "clock_step" in chosen:
        deployment.steppable(stepped)  # its wall clock steps while it runs
    with contextlib.ExitStack() as stack:
        proxy: FreezableProxy | None = None
        database = urlsplit(url)
        target = (database.hostname or "127.0.0.1", database.port or 5432)
        if backend == "postgres":
            proxy = stack.enter_context(freezable_proxy(*target))
            deployment.route(0, proxy.url_through(url))
        injector = Injector(deployment, url, rate, chosen, proxy, seed, server)
        if "clock_step" in chosen and backend == "postgres":  # to count its statements
            injector.step_proxy = stack.enter_context(freezable_proxy(*target))
            deployment.route(stepped, injector.step_proxy.url_through(url))
        # Undone last to first: the faults stop (none restarts a worker), then
        # every worker is killed, whatever ended the run.
        stack.callback(deployment.kill_all)
        stack.callback(injector.stop)
        if "clock_step" in chosen:  # the worst case: the stepped worker leads at first
            deployment.start(deployment.slots[stepped])
            wait_until(lambda: deployment.events("scheduler.leading"), timeout=60, what="a leader")
        deployment.start_all()
        wait_until(  # (on SQLite the skewed worker refuses to start: checked below)
            lambda: len(deployment.events("worker.started")) >= workers,
            timeout=60,
            what="the workers to start",
        )
        started = time.time()
        injector.start()

        def done() -> bool:
            return not _not_done(backend, chosen, injector, deployment, ledger)

        actions = _load(url, seconds, random.Random(seed), deployment.fixes, burst, done, overtime)
        load_ended = time.time()
        injector.stop()
        deployment.restart_dead()
        _drain(url, load_ended, STALLED_AFTER)
        unfinished = _unfinished_rows(url, load_ended)
        alive = {deployment.worker_pid(slot) for slot in deployment.alive()}
        codes = deployment.stop_all()
        facts = _facts(url, load_ended)
    verdict = judge(
        backend=backend,
        seconds=load_ended - started,
        load_ended=load_ended,
        ledger=read_ledger(ledger),
        faults=injector.log,
        leadership=[
            (e["ts"], int(str(e["holder"]).split(":")[-2]))
            for e in deployment.events("scheduler.leading")
        ],
        limits={limit.name: limit for limit in chaos_app.app.limits},
        actions=actions,
        alive_at_end=alive,
        **facts,
    )
    verdict.worker_exit_codes = list(codes.values())
    verdict.claims_cut = proxy.claims_cut if proxy is not None else 0
    verdict.unfinished = unfinished
    verdict.skewed_executions = _skewed_executions(deployment, ledger)
    verdict.step_pace = injector.step_pace
    verdict.stepped_executions = _stepped_executions(deployment, ledger, injector)
    verdict.skewed_refusals = _skewed_refusals(deployment)
    verdict.write(folder / f"verdict-{backend}.json")
    return verdict


def _not_done(
    backend: str, chosen: list[str], injector: Injector, deployment: Deployment, ledger: Path
) -> list[str]:
    """What the run has not done yet of what it is there for (a loaded machine
    starts workers late and finds fewer targets for faults)."""
    missing = [f"fault {kind}" for kind in chosen if kind not in injector.landed()]
    if backend == "postgres" and not _skewed_executions(deployment, ledger):
        missing.append("an attempt of the worker an hour ahead")
    if backend != "postgres" and not _skewed_refusals(deployment):
        missing.append("a refusal of the worker an hour ahead")
    return missing


def _skewed_executions(deployment: Deployment, ledger: Path) -> int:
    """Attempts started by the worker whose wall clock is an hour ahead."""
    skewed = deployment.skewed_pids()
    return sum(1 for line in read_ledger(ledger) if line.pid in skewed and line.kind == "start")


def _skewed_refusals(deployment: Deployment) -> int:
    """Times the worker an hour ahead refused to start (SQLite: the host's clock decides)."""
    return sum(
        SKEW_REFUSAL in deployment.log_path(slot, n).read_text(errors="replace")
        for slot in deployment.slots
        if slot.skewed
        for n in range(len(slot.pids))
        if deployment.log_path(slot, n).exists()
    )


def _stepped_executions(deployment: Deployment, ledger: Path, injector: Injector) -> int:
    """Attempts started by the worker whose wall clock stepped, after its first step."""
    steps = [fault.at for fault in injector.log if fault.kind == "clock_step"]
    stepped = {
        deployment.worker_pid(slot, n)
        for slot in deployment.slots
        if slot.clock_file is not None
        for n in range(len(slot.pids))
    }
    return sum(
        1
        for line in read_ledger(ledger)
        if steps and line.pid in stepped and line.kind == "start" and line.at > min(steps)
    )


def _create_ledger_table(url: str) -> None:
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(_sqlite_path(url))) as conn, conn:
            conn.execute(LEDGER_TABLE.replace("bigint", "integer"))
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(LEDGER_TABLE)


def _sqlite_path(url: str) -> str:
    from due.store.sqlite.backend import path_from_url

    return path_from_url(url)


def _load(
    url: str,
    seconds: float,
    rng: random.Random,
    fixes: Path,
    burst: int = 0,
    done: Callable[[], bool] = lambda: True,
    overtime: float = 0.0,
) -> list[Action]:
    """Enqueue a steady mix (about 40 jobs a second) until `seconds` have passed
    and `done()` (looked at once a second), or `overtime` more have passed,
    and `burst` jobs at once a third of the way in; beside it, flow control
    (flow_load.py): jobs under limits, and workflows an operator cancels or
    retries (those calls returned). Each request of the mix carries a key, so
    one repeated after an outage is not doubled."""
    with due.App(url) as app:
        for limit in chaos_app.app.limits:  # the keys are computed here, at enqueue
            app.limits.declare(limit.name, concurrency=limit.concurrency, rate=limit.rate_text)
        for task in chaos_app.app.tasks:
            app.tasks.add(due.Task(app, task.fn, task.name, task.config))
        tasks = {task.name.removeprefix("chaos."): task for task in app.tasks}
        flows = FlowLoad(app, tasks, random.Random(rng.random()), fixes)  # beside the mix
        deadline = time.monotonic() + seconds
        burst_at = time.monotonic() + seconds / 3 if burst else float("inf")
        number, look_at = 0, deadline
        while (now := time.monotonic()) < deadline + overtime:
            if now >= look_at:
                if done():
                    break
                look_at = now + CHECK_EVERY
            if now >= burst_at:
                _burst(app, tasks["burst"], burst)
                burst_at = float("inf")
            number += 1
            with contextlib.suppress(due.StoreUnavailableError):
                _enqueue_one(app, tasks, number, rng)
            with contextlib.suppress(due.StoreUnavailableError):
                flows.tick(number)
            time.sleep(0.025)
    return flows.actions


def _burst(app: due.App, task: Any, count: int) -> None:
    """`count` jobs in transactions of 10,000, while the workers run."""
    for start in range(0, count, 10_000):
        requests = [task.request(n) for n in range(start, min(start + 10_000, count))]
        for _ in range(20):  # an outage meanwhile (a fault): that chunk again
            try:
                app.enqueue_many(requests)
                break
            except due.StoreUnavailableError:
                time.sleep(0.5)


def _enqueue_one(app: due.App, tasks: dict[str, Any], number: int, rng: random.Random) -> None:
    roll = rng.random()
    key = f"chaos:{number}"
    if roll < 0.35:
        tasks["quick"].options(key=key).enqueue(number)
    elif roll < 0.55:
        tasks["async_quick"].options(key=key).enqueue(number)
    elif roll < 0.70:
        tasks["quick"].options(key=key, delay=rng.uniform(0.2, 3.0)).enqueue(number)
    elif roll < 0.82:
        tasks["slow"].options(key=key).enqueue(number, rng.randint(5, 30))
    elif roll < 0.90:
        tasks["checkpointed"].options(key=key).enqueue(number, rng.randint(20, 50))
    elif roll < 0.95:
        items = [(number * 100 + i,) for i in range(rng.randint(3, 12))]
        app.batch(tasks["piece"], items, on_complete=tasks["pieces_done"])
    elif roll < 0.975:  # longer than the grace: a SIGTERM stops it at a safe point
        tasks["long_sync"].options(key=key).enqueue(number, rng.randint(60, 120))
    elif roll < 0.99:
        kind = rng.choice(list(chaos_app.HOSTILE_VALUES))
        tasks["hostile"].options(key=key).enqueue(number, kind)
    else:  # its first attempt raises SystemExit or KeyboardInterrupt
        task = tasks[rng.choice(["exits", "async_exits"])]
        task.options(key=key).enqueue(number, rng.choice(chaos_app.EXITS))


def _drain(url: str, load_ended: float, stalled_after: float) -> None:
    """Wait until no job due before the load ended is unfinished, as long as that
    number keeps falling: a job still unfinished after `stalled_after` seconds
    without progress is lost (at most DRAIN_LIMIT seconds in all)."""
    deadline = time.monotonic() + DRAIN_LIMIT
    best, moved = float("inf"), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - moved < stalled_after:
        with contextlib.suppress(Exception):
            left = _unfinished(url, load_ended)
            if left == 0:
                return
            if left < best:
                best, moved = left, time.monotonic()
        time.sleep(0.5)


def _query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(_sqlite_path(url))) as conn:
            return conn.execute(sql.replace("%s", "?"), params).fetchall()
    with psycopg.connect(url) as pg:
        return [tuple(row) for row in pg.execute(sql, params).fetchall()]


def _epoch(url: str, column: str) -> str:
    return column if url.startswith("sqlite") else f"extract(epoch FROM {column})"


def _unfinished(url: str, load_ended: float) -> int:
    """Jobs due before the load ended not finished, and workflows enqueued before
    it not ended (a step released after the load ended is due after it)."""
    (row,) = _query(
        url,
        f"SELECT count(*) FROM due_jobs WHERE state IN ('queued', 'running', 'waiting') "
        f"AND {_epoch(url, 'run_at')} <= %s",
        (load_ended,),
    )
    (flows,) = _query(
        url,
        f"SELECT count(*) FROM due_workflows WHERE state = 'running' "
        f"AND {_epoch(url, 'created_at')} <= %s",
        (load_ended,),
    )
    return int(row[0]) + int(flows[0])


def _unfinished_rows(url: str, load_ended: float) -> list[dict[str, Any]]:
    columns = ["id", "task", "state", "attempt", "lease_token", "worker"]
    times = ["run_at", "lease_expires_at", "started_at"]
    selected = ", ".join(columns + [_epoch(url, t) for t in times])
    rows = _query(
        url,
        f"SELECT {selected} FROM due_jobs WHERE state IN ('queued', 'running', 'waiting') "
        f"AND {_epoch(url, 'run_at')} <= %s",
        (load_ended,),
    )
    return [dict(zip(columns + times, row, strict=True)) for row in rows]


def _facts(url: str, load_ended: float) -> dict[str, Any]:
    rows = _query(
        url,
        f"SELECT id, state, {_epoch(url, 'run_at')}, errors, {_epoch(url, 'created_at')}, "
        "attempt, task, last_error, workflow_id, on_upstream_failure, limits FROM due_jobs",
    )
    jobs = {
        int(job_id): {
            "state": state,
            "errors": _count(errors),
            "error_kinds": [entry.get("kind") for entry in _errors(errors)],
            "run_at": float(run_at),
            "created_at": float(created_at),
            "attempt": int(attempt),
            "task": task,
            "last_error": last_error,
            "workflow": None if workflow is None else int(workflow),
            "policy": policy,
            "limited": bool(limits),
        }
        for (
            job_id,
            state,
            run_at,
            errors,
            created_at,
            attempt,
            task,
            last_error,
            workflow,
            policy,
            limits,
        ) in rows
    }
    edges = [
        (int(u), int(s))
        for u, s in _query(url, "SELECT upstream_id, step_id FROM due_workflow_edges")
    ]
    workflows = {
        int(w): {
            "state": state,
            "created_at": float(created),
            "finished_at": None if finished is None else float(finished),
        }
        for w, state, created, finished in _query(
            url,
            f"SELECT id, state, {_epoch(url, 'created_at')}, {_epoch(url, 'finished_at')} "
            "FROM due_workflows",
        )
    }
    runs = _query(
        url,
        f"SELECT schedule, {_epoch(url, 'scheduled_for')}, outcome, job_id FROM due_schedule_runs",
    )
    return {
        "enqueued": {
            job_id: job["run_at"] for job_id, job in jobs.items() if job["created_at"] <= load_ended
        },
        "jobs": jobs,
        "successes": [
            (int(j), int(t), str(d))
            for j, t, d in _query(url, "SELECT job_id, token, detail FROM chaos_ledger")
        ],
        "schedule_runs": [(s, float(f), o, j) for s, f, o, j in runs],
        "edges": edges,
        "workflows": workflows,
    }


def _errors(errors: Any) -> list[dict[str, Any]]:
    """A job's history (a JSON text on SQLite, a list on PostgreSQL)."""
    found = json.loads(errors) if isinstance(errors, str) else errors or []
    return [entry for entry in found if isinstance(entry, dict)]


def _count(errors: Any) -> int:
    return len(json.loads(errors) if isinstance(errors, str) else errors or [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=300.0, help="How long the load lasts.")
    parser.add_argument("--rate", type=float, default=0.5, help="Faults a second, on average.")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--burst", type=int, default=0, help="Jobs enqueued at once mid-load.")
    parser.add_argument("--out", type=Path, default=Path("chaos-results"))
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    ok = True
    for backend in backends:
        folder = args.out / f"{backend}-{time.strftime('%Y%m%d-%H%M%S')}"
        with contextlib.ExitStack() as stack:
            server: PrivatePostgres | None = None
            if backend == "postgres":  # a server of its own: its faults disturb no one
                server = stack.enter_context(private_cluster())
                url = server.url()
            else:
                folder.mkdir(parents=True, exist_ok=True)
                url = f"sqlite:///{folder / 'chaos.db'}"
            verdict = run(
                backend,
                url,
                folder,
                seconds=args.seconds,
                rate=args.rate,
                workers=args.workers,
                seed=args.seed,
                burst=args.burst,
                server=server,
            )
        print(verdict.table(), flush=True)
        print(f"(written to {folder})\n", flush=True)
        ok = ok and verdict.ok()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
