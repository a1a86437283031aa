"""Jobs waiting for their limit's keys: what do they cost the pickup of other jobs?

    .venv/bin/python bench/limit_keys_bench.py [--backend sqlite|postgres|both]
                                               [--keys 10000] [--rounds 5] [--jobs 30]
                                               [--quick]

Issue 49's finding 9: before each claim, a worker that knows limits looked at
up to 200 keys with waiting jobs, and counted each one's running jobs by
reading every running limited job (with 1,000 such keys, the pickup of an
unlimited job went from 6 to 384 ms on PostgreSQL). Target: beside 10,000
waiting keys, the pickup of unlimited jobs within 1.2x of none.

Two databases per backend, each with one real `due worker` (`-q default=4 -q
other=4`, `--no-scheduler`, log level warning) of this module's `app`: the
limit `acct` (concurrency 1 per key), a task `sync` counting against it per
account, and unlimited no-op tasks `free` (queue default) and `elsewhere`
(queue other). `none` holds no limited job; `keys` holds --keys keys, each with
one job running (put running by SQL, its lease an hour away: never rescued
during the run, never ending) and one waiting for it (put waiting by SQL, its
key marked waiting), as claims leave them.

Rounds alternate between the two (A B, B A, ...), --rounds each. A round
enqueues --jobs jobs of `free` one at a time, each once the previous has
ended, then as many of `elsewhere`: a job's pickup is its started_at minus its
created_at (the database's times). Per round, the median pickup in each queue;
the table gives the median [min-max] over the rounds, and the ratio of the
medians (keys / none). Besides: how long one page of the sweep of the waiting
keys takes (1,000 keys, `store.limit_reopen()`, what each worker runs every 5
s), from this process, median [min-max] of one per round.

One JSON line per round on stdout, also appended to bench/results/results.jsonl,
then a table per backend. `--quick`: 200 keys, one round of 5 jobs each (a
smoke run, seconds; its figures mean nothing).
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

URL_ENV = "DUE_LIMIT_KEYS_BENCH_URL"
DASH = run.DASH
SIDES = ("none", "keys")
QUEUES = {"free": "default", "elsewhere": "other"}


def make_app(url: str) -> due.App:
    app = due.App(url)
    app.limit("acct", concurrency=1)

    @app.task(name="sync", limits={"acct": lambda account: account})
    async def sync(account: str) -> None: ...

    @app.task(name="free")
    async def free(n: int) -> None: ...

    @app.task(name="elsewhere", queue="other")
    async def elsewhere(n: int) -> None: ...

    return app


# The worker process imports this module by name and takes `app` from it.
if os.environ.get(URL_ENV):
    app = make_app(os.environ[URL_ENV])


# Jobs of `sync` put running (a worker that does not exist holds them, its
# lease an hour away), then as many put waiting for their keys, marked waiting.
RUNNING = {
    "postgres": """
        UPDATE due_jobs SET state = 'running', attempt = 1, lease_token = lease_token + 1,
               lease_expires_at = now() + interval '1 hour', started_at = now(),
               worker = 'bench-ghost', attempt_status = 'started'
        WHERE task = 'sync' AND state = 'queued'""",
    "sqlite": """
        UPDATE due_jobs SET state = 'running', attempt = 1, lease_token = lease_token + 1,
               lease_expires_at = unixepoch('subsec') + 3600, started_at = unixepoch('subsec'),
               worker = 'bench-ghost', attempt_status = 'started'
        WHERE task = 'sync' AND state = 'queued'""",
}
WAITING = {
    "postgres": [
        """UPDATE due_jobs SET limit_wait = 'acct', limit_wait_key = limits -> 0 ->> 1
           WHERE task = 'sync' AND state = 'queued'""",
        """INSERT INTO due_limit_keys (name, key, waiting)
           SELECT 'acct', limits -> 0 ->> 1, true FROM due_jobs
           WHERE task = 'sync' AND state = 'running'""",
    ],
    "sqlite": [
        """UPDATE due_jobs SET limit_wait = 'acct', limit_wait_key = limits ->> '$[0][1]'
           WHERE task = 'sync' AND state = 'queued'""",
        """INSERT INTO due_limit_keys (name, key, waiting)
           SELECT 'acct', limits ->> '$[0][1]', 1 FROM due_jobs
           WHERE task = 'sync' AND state = 'running'""",
    ],
}


class Side:
    """One database, its app (enqueues, reads) and its worker."""

    def __init__(self, backend: str, name: str) -> None:
        self.backend = backend
        self.name = name
        self.url = common.fresh_due_url(backend, f"limit_keys_{name}")
        self.app = make_app(self.url)
        self.app.migrate()
        self.app.sync_limits()
        self.worker: subprocess.Popen[bytes] | None = None

    def execute(self, statement: str) -> None:
        if self.backend == "sqlite":
            with sqlite3.connect(self.url.split(":///", 1)[1], timeout=30) as conn:
                conn.execute(statement)
        else:
            common.pg_execute(self.url.rsplit("/", 1)[1], statement)

    def fill(self, keys: int) -> None:
        """`keys` keys, each with a job running and one waiting for it."""
        self._enqueue_syncs(keys)
        self.execute(RUNNING[self.backend])
        self._enqueue_syncs(keys)
        for statement in WAITING[self.backend]:
            self.execute(statement)
        self.execute("ANALYZE" if self.backend == "sqlite" else "VACUUM ANALYZE")

    def _enqueue_syncs(self, keys: int) -> None:
        sync = self.app.tasks.get("sync")
        for start in range(0, keys, common.CHUNK):
            chunk = range(start, min(keys, start + common.CHUNK))
            self.app.enqueue_many([sync.request(f"k{n}") for n in chunk])

    def start_worker(self) -> None:
        env = {URL_ENV: self.url, "PYTHONPATH": str(common.BENCH_DIR)}
        cmd = [
            sys.executable, "-m", "due", "worker", "--app", "limit_keys_bench:app",
            "-q", "default=4", "-q", "other=4", "--no-scheduler", "--log-level", "warning",
        ]  # fmt: skip
        log = common.WORK_DIR / "logs" / f"limit-keys-{self.backend}-{self.name}.log"
        self.worker = common.spawn(cmd, log, env)
        worker = self.worker
        ready = common.wait_until(
            lambda: any(w.state == "running" for w in self.app.store.worker_list()),
            timeout=60,
            abort=lambda: worker.poll() is not None,
        )
        if not ready:
            raise RuntimeError(f"the worker did not start on {self.name}: see {log}")

    def pickups(self, task: str, jobs: int) -> list[float]:
        """ms from created_at to started_at of `jobs` jobs enqueued one at a time."""
        found = []
        for n in range(jobs):
            job = self.app.tasks.get(task).enqueue(n)
            done = self.app.wait(job.id, timeout="60s")
            assert done.started_at is not None and done.created_at is not None, done
            found.append(1000 * (done.started_at - done.created_at).total_seconds())
        return found

    def sweep_ms(self) -> float:
        started = time.perf_counter()
        self.app.store.limit_reopen()
        return 1000 * (time.perf_counter() - started)

    def close(self) -> None:
        if self.worker is not None:
            common.stop_due_worker(self.worker)
        self.app.close()


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    sides: dict[str, Side] = {}
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    try:
        for name in SIDES:
            sides[name] = Side(backend, name)
        started = time.monotonic()
        sides["keys"].fill(args.keys)
        fill_s = time.monotonic() - started
        for side in sides.values():
            side.start_worker()
        for round_ in range(args.rounds):
            for name in SIDES if round_ % 2 == 0 else SIDES[::-1]:
                side = sides[name]
                rec: dict[str, Any] = {"round": round_, "keys": args.keys if name == "keys" else 0}
                for task, queue in QUEUES.items():
                    rec[f"pickup_ms_{queue}"] = statistics.median(side.pickups(task, args.jobs))
                rec["sweep_ms"] = side.sweep_ms()
                head = {"bench": "limit_keys", "backend": backend, "side": name}
                common.save(head | {"ts": round(time.time(), 3), "fill_s": round(fill_s, 1)} | rec)
                results[name].append(rec)
        waiting = sides["keys"].app.store.limit_overview()[0].waiting
        common.save({"bench": "limit_keys", "backend": backend, "still_waiting": waiting})
    finally:
        for side in sides.values():
            side.close()
    return results


def spread(values: Sequence[float], digits: int = 1) -> str:
    fmt = f"{{:,.{digits}f}}"
    if len(values) == 1:
        return fmt.format(values[0])
    return (
        f"{fmt.format(statistics.median(values))} "
        f"[{fmt.format(min(values))}{DASH}{fmt.format(max(values))}]"
    )


def report(backend: str, found: dict[str, list[dict[str, Any]]], keys: int) -> str:
    lines = [
        f"\n### Pickup of unlimited jobs beside {keys:,} waiting keys, {backend}\n",
        f"| ms, median of the rounds' medians [min{DASH}max] | none | {keys:,} keys | ratio |",
        "|---|---|---|---|",
    ]
    for queue in QUEUES.values():
        none = [r[f"pickup_ms_{queue}"] for r in found["none"]]
        held = [r[f"pickup_ms_{queue}"] for r in found["keys"]]
        ratio = statistics.median(held) / statistics.median(none)
        place = "the same queue" if queue == "default" else "another queue"
        lines.append(f"| pickup, {place} | {spread(none)} | {spread(held)} | {ratio:.2f} |")
    lines.append(
        f"| a page of the sweep (1,000 keys) | {spread([r['sweep_ms'] for r in found['none']])}"
        f" | {spread([r['sweep_ms'] for r in found['keys']])} | |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each side")
    parser.add_argument("--jobs", type=int, default=30, help="jobs of each queue per round")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    args = parser.parse_args()
    if args.quick:
        args.keys, args.rounds, args.jobs = 200, 1, 5
    common.exit_on_sigterm()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        print(report(backend, run_backend(backend, args), args.keys), flush=True)


if __name__ == "__main__":
    main()
