"""Where a pickup's time goes: each hop from an enqueue to its job's start, timed.

A diagnostic, not a benchmark (bench/NOTES.md, "Pickup and a delayed job's
lateness"): one worker process (`run_worker`, one queue of 100 slots) on a
fresh database, jobs enqueued one by one 50 ms apart from this process, as
`bench/run.py`'s latency test does. The worker's wake-up, its reaction and
its claim are wrapped to note the time each one happens (the real calls
run), and each job's body writes them down with its own start. Per hop,
p50 / p90 / p99 / max in ms:

  enqueue          the enqueue call in this process (its commit: an fsync)
  to_heard         its return to the worker's wake-up thread hearing it (below
                   zero on PostgreSQL: the notification can arrive before the
                   enqueuing process has read its COMMIT's reply)
  heard_to_on_due  that thread to the event loop taking the wake-up
  on_due_to_claim  the loop to the claim being sent
  claim            the claim (its commit: an fsync)
  claim_to_start   the claim's reply to the job body's first line
  total            the enqueue's call to the body's first line (run.py's pickup)

    .venv/bin/python bench/pickup_probe.py --backend sqlite --n 200
    .venv/bin/python bench/pickup_probe.py --backend postgres
    .venv/bin/python bench/pickup_probe.py --backend sqlite --no-sync   # without the disk

`--no-sync` runs SQLite with synchronous=OFF in both processes: a diagnostic
that shows the wake-up's part alone, never a setting to run with.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import due

MARKS: dict[str, float] = {}
"""The worker's notes for the job it is about to start (one at a time: the
jobs are 50 ms apart)."""
HOPS = ("enqueue", "to_heard", "heard_to_on_due", "on_due_to_claim", "claim", "claim_to_start")


def make_app(url: str, notes: str) -> tuple[due.App, Any]:
    app = due.App(url)

    @app.task(name="probe")
    async def probe(ref: str, t_ref: float) -> None:
        line = json.dumps({"ref": ref, "t_ref": t_ref, "start": time.time(), **MARKS})
        with open(notes, "a") as out:
            out.write(line + "\n")

    return app, probe


def without_sync() -> None:
    """SQLite connections with synchronous=OFF (the diagnostic's `--no-sync`)."""
    from due.store.sqlite import backend

    opened = backend.SQLiteBackend._open

    def open_without_sync(self: Any) -> Any:
        conn = opened(self)
        conn.execute("PRAGMA synchronous = OFF")
        return conn

    backend.SQLiteBackend._open = open_without_sync  # type: ignore[method-assign]


def noted_worker(url: str, notes: str) -> None:
    """The worker, with its wake-up, reaction and claim noting their times."""
    from due.worker import statements, wakeups, worker
    from due.worker.main import configure_logging, run_worker
    from due.worker.settings import WorkerSettings

    signal, on_due = wakeups.Wakeups._signal, worker.Worker._on_due
    claim = statements.Statements.claim

    def noted_signal(self: Any, queue: str, run_at: Any) -> None:
        MARKS.clear()
        MARKS["heard"] = time.time()
        signal(self, queue, run_at)

    def noted_on_due(self: Any, queue: str, run_at: Any) -> None:
        MARKS.setdefault("on_due", time.time())
        on_due(self, queue, run_at)

    async def noted_claim(self: Any, jobs: Any, limit: int) -> Any:
        MARKS.setdefault("claim_sent", time.time())
        claimed = await claim(self, jobs, limit)
        if claimed:
            MARKS["claim_back"] = time.time()
        return claimed

    wakeups.Wakeups._signal = noted_signal  # type: ignore[method-assign]
    worker.Worker._on_due = noted_on_due  # type: ignore[method-assign]
    statements.Statements.claim = noted_claim  # type: ignore[method-assign]
    configure_logging("text", "warning")
    app, _ = make_app(url, notes)
    run_worker(app, WorkerSettings.build({"default": 100}))


def hops(row: dict[str, Any], enqueue_s: float) -> dict[str, float]:
    """Each hop of one job, in ms (those the worker noted)."""
    at = {"sent": row["t_ref"], "returned": row["t_ref"] + enqueue_s, **row}
    pairs = {
        "enqueue": ("sent", "returned"),
        "to_heard": ("returned", "heard"),
        "heard_to_on_due": ("heard", "on_due"),
        "on_due_to_claim": ("on_due", "claim_sent"),
        "claim": ("claim_sent", "claim_back"),
        "claim_to_start": ("claim_back", "start"),
        "total": ("sent", "start"),
    }
    return {
        hop: (at[end] - at[begin]) * 1000.0
        for hop, (begin, end) in pairs.items()
        if begin in at and end in at
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--no-sync", action="store_true", help="SQLite: synchronous=OFF")
    parser.add_argument("--worker", nargs=2, metavar=("URL", "NOTES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.no_sync:
        without_sync()
    if args.worker:
        noted_worker(*args.worker)
        return
    work = common.WORK_DIR / "pickup_probe"
    work.mkdir(parents=True, exist_ok=True)
    if args.backend == "postgres":
        db = f"{common.DB_PREFIX}pickup_probe"
        common.recreate_pg_db(db)
        url = common.pg_url(db)
    else:
        url = f"sqlite:///{common.fresh_sqlite_path(work / 'probe.db')}"
    notes = work / "notes.jsonl"
    notes.write_text("")
    app, probe = make_app(url, str(notes))
    app.migrate()
    flags = ["--no-sync"] if args.no_sync else []
    worker = subprocess.Popen(
        [sys.executable, __file__, *flags, "--worker", url, str(notes)], start_new_session=True
    )
    try:
        probe.enqueue("warm", time.time())
        common.wait_until(lambda: "warm" in notes.read_text(), 60.0)
        time.sleep(1.0)  # idle
        enqueue_s = {}
        for i in range(args.n):
            sent = time.time()
            probe.enqueue(f"p{i}", sent)
            enqueue_s[f"p{i}"] = time.time() - sent
            time.sleep(0.05)
        common.wait_until(lambda: notes.read_text().count('"p') >= args.n, 30.0)
    finally:
        common.kill_group(worker)
        app.close()
    rows = [json.loads(line) for line in notes.read_text().splitlines()]
    by_hop: dict[str, list[float]] = {}
    for row in rows:
        if row["ref"] in enqueue_s:
            for hop, ms in hops(row, enqueue_s[row["ref"]]).items():
                by_hop.setdefault(hop, []).append(ms)
    how = " without sync" if args.no_sync else ""
    print(f"{args.backend}{how}, load1 {os.getloadavg()[0]:.2f}")
    for hop in (*HOPS, "total"):
        values = by_hop.get(hop, [])
        figures = " ".join(
            f"{name} {common.percentile(values, p) or 0:7.2f}"
            for name, p in (("p50", 50), ("p90", 90), ("p99", 99))
        )
        print(f"  {hop:16s} n={len(values):4d} {figures} max {max(values, default=0):7.2f}")


if __name__ == "__main__":
    main()
