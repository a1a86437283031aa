"""The scheduler benchmark: lateness of an every-second schedule, and leader failover.

    .venv/bin/python bench/schedule_bench.py [--backend sqlite|postgres|both]
                                             [--seconds 120] [--quick]

lateness  one worker (with its scheduler) runs an every-second schedule for
          --seconds; each run's start minus the time it was scheduled for, from
          the effects log: p50 / p99 / max ms.
failover  two workers with the default leader lease (10 s); the leader's process
          group gets SIGKILL; seconds until the next run starts (the other
          scheduler took the lease and materialised the times due meanwhile).

due only (the peers have no schedules with leader election to compare). One
JSON line per result on stdout, also appended to bench/results/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due
from due.worker.main import configure_logging, run_worker
from due.worker.settings import WorkerSettings

SCHEDULE = "bench-every-second"


def make_app(url: str) -> due.App:
    app = due.App(url)

    @app.task(name="bench_scheduled")
    async def bench_scheduled(ctx: due.Context) -> None:
        assert ctx.scheduled_for is not None
        moment = ctx.scheduled_for.timestamp()
        await common.run_job_async(f"s{moment:.0f}", moment, 0.0)

    app.schedule(SCHEDULE, every="1s", task=bench_scheduled, overlap="allow")
    return app


def url_for(backend: str, test: str) -> str:
    if backend == "postgres":
        database = f"{common.DB_PREFIX}due_schedule_{test}"
        common.recreate_pg_db(database)
        return common.pg_url(database)
    path = common.fresh_sqlite_path(common.WORK_DIR / "db" / f"due_{backend}_schedule_{test}.db")
    return f"sqlite:///{path}"


def worker_command(url: str) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "worker", "--url", url]


def measure_lateness(backend: str, seconds: float) -> dict[str, Any]:
    url = url_for(backend, "lateness")
    make_app(url).migrate()
    effects = common.EffectsLog.fresh(common.WORK_DIR / "effects" / f"schedule-{backend}.log")
    with common.Workers() as workers:
        workers.spawn(
            worker_command(url), common.WORK_DIR / "logs" / "schedule-A.log", effects.path
        )
        time.sleep(seconds + 1.5)
    effects.poll()
    late = [
        (start.t - start.t_ref) * 1000 for starts in effects.starts.values() for start in starts[:1]
    ]
    runs = sorted(effects.starts)
    duplicates = sum(1 for starts in effects.starts.values() if len(starts) > 1)
    summary = common.ms_summary(late[2:])  # the first runs include the worker's start-up
    return record(
        backend,
        "schedule_lateness",
        n=len(late),
        value=summary["p50_ms"],
        unit="ms",
        values={**summary, "runs": len(runs)},
        checks={"duplicates": duplicates},
    )


def measure_failover(backend: str) -> dict[str, Any]:
    url = url_for(backend, "failover")
    make_app(url).migrate()
    effects = common.EffectsLog.fresh(common.WORK_DIR / "effects" / f"failover-{backend}.log")
    logs = common.WORK_DIR / "logs"
    with common.Workers() as workers:
        first = workers.spawn(worker_command(url), logs / "failover-A.log", effects.path)
        started = common.wait_until(lambda: _seen(effects) >= 2, 60)
        second = workers.spawn(worker_command(url), logs / "failover-B.log", effects.path)
        time.sleep(3)  # B is up, and standing by
        killed_at = time.time()
        common.kill_group(first)
        resumed = common.wait_until(lambda: _latest_start(effects) > killed_at + 0.5, 60)
        value = _first_start_after(effects, killed_at + 0.5) - killed_at if resumed else None
        common.kill_group(second)
    return record(
        backend,
        "schedule_failover",
        n=1,
        value=value,
        unit="s",
        values={"lease_s": 10.0},
        checks={"started": started, "resumed": resumed},
    )


def _seen(effects: common.EffectsLog) -> int:
    effects.poll()
    return len(effects.starts)


def _latest_start(effects: common.EffectsLog) -> float:
    effects.poll()
    return max((s.t for starts in effects.starts.values() for s in starts), default=0.0)


def _first_start_after(effects: common.EffectsLog, moment: float) -> float:
    return min(s.t for starts in effects.starts.values() for s in starts if s.t > moment)


def record(backend: str, test: str, **fields: Any) -> dict[str, Any]:
    result = {
        "lib": "due",
        "backend": backend,
        "test": test,
        "setting": "every 1s",
        "version": due.__version__,
        "ts": round(time.time(), 3),
        **fields,
    }
    line = json.dumps(result)
    print(line, flush=True)
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with (common.RESULTS_DIR / "results.jsonl").open("a") as out:
        out.write(line + "\n")
    return result


def run_worker_process(url: str) -> None:
    common.start_watchdog()
    configure_logging("text", "warning")
    run_worker(make_app(url), WorkerSettings.build({"default": 10}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs="?", default="all", choices=["all", "worker"])
    parser.add_argument("--backend", default="both", choices=["sqlite", "postgres", "both"])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--quick", action="store_true", help="20 s of lateness")
    parser.add_argument("--url")
    args = parser.parse_args()
    if args.command == "worker":
        run_worker_process(args.url)
        return
    common.exit_on_sigterm()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    rows = []
    for backend in backends:
        rows.append(measure_lateness(backend, 20.0 if args.quick else args.seconds))
        rows.append(measure_failover(backend))
    print("\n| backend | test | value | p99 | runs / checks |\n|---|---|---|---|---|")
    for row in rows:
        values = row.get("values", {})
        print(
            f"| {row['backend']} | {row['test']} | {row['value']} {row['unit']} | "
            f"{values.get('p99_ms', '')} | {values.get('runs', '')} {row.get('checks')} |"
        )


if __name__ == "__main__":
    main()
