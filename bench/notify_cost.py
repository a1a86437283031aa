"""What an enqueue's wake-up costs on PostgreSQL, alone and with processes side by side.

    .venv/bin/python bench/notify_cost.py [--processes 1,4,8] [--jobs 2400] [--runs 5]

An enqueue on PostgreSQL wakes idle workers with a notification sent by its own
statement (`insert_job`'s `pg_notify`). At commit the server takes one lock for
all of its notifications and holds it until the commit has been flushed to
disk, so transactions that notify commit one after another, never together in
one flush. This measures what that costs: `processes` processes (each its own
connection, one job at a time, autocommitted, as several web server processes
enqueue) run due's `insert_job` as the store sends it, and the same statement
with its `pg_notify(channel, payload)` turned into `concat_ws(channel, payload)`
(the same arguments computed, no notification), and a single enqueue as the
store now sends it on its own session (store/postgres/woken_apart.py: the row
committed alone, then its wake-up in a transaction that does not wait for a
flush, one pipelined round trip): jobs/s of each, interleaved run by run, the
order reversed every other run, while one connection LISTENs and reads every
notification, as an idle worker does. The statements only, without due's
Python: what the database does.

A table of medians [min-max] and the ratios to the first shape. PostgreSQL only (SQLite's workers
watch its commits, with no notification).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import due

PARAMS = {
    "task": "job",
    "queue": "default",
    "priority": 0,
    "payload": '{"args":[1],"kwargs":{}}',
    "run_at": None,
    "delay": 0.0,
    "max_attempts": 1,
    "key": None,
    "unique_for": None,
    "stuck_after": None,
    "limits": None,
    "now": None,
}
SHAPES = ("with its wake-up", "without", "wake-up apart")
NOTIFYING = (SHAPES[0], SHAPES[2])


def statements(url: str) -> tuple[dict[str, str | tuple[str, str]], psycopg.Connection[Any]]:
    """insert_job as the store sends it (its channel named by a literal, once the
    schema is checked), the same without the notification, and a single
    enqueue's as the store sends it on its own session: the row, then its
    wake-up in a transaction of its own (store/postgres/woken_apart.py); and a
    connection LISTENing as a worker's does (the store's own, which outlives
    the app)."""
    app = due.App(url)
    try:
        app.migrate()
        app.store.check_schema()
        backend: Any = app.store.backend
        listening = backend.listen_connection()  # names the channel, then the queries
        sent = backend._queries["insert_job"]
        apart = (backend._queries["insert_job_unwoken"], backend._queries["wake_inserted_job"])
    finally:
        app.close()
    if sent.count("pg_notify(") != 1:
        listening.close()
        raise SystemExit("insert_job no longer sends one pg_notify: update notify_cost.py")
    quiet = sent.replace("pg_notify(", "concat_ws(")
    return {SHAPES[0]: sent, SHAPES[1]: quiet, SHAPES[2]: apart}, listening


def _insert(
    url: str, statement: str | tuple[str, str], count: int, start: Barrier, results: Any
) -> None:
    with psycopg.connect(url, autocommit=True) as conn:

        def one() -> None:
            if isinstance(statement, str):
                conn.execute(statement, PARAMS).fetchall()
                return
            insert, wake = statement  # as woken_apart.py sends them: one round trip
            with conn.pipeline():
                conn.execute("BEGIN")
                inserted = conn.execute(insert, PARAMS)
                conn.execute("COMMIT")
                conn.execute(wake)
            inserted.fetchall()

        one()  # connected, before the start
        start.wait()
        for _ in range(count):
            one()
        results.put(count)


def one_run(url: str, statement: str | tuple[str, str], processes: int, jobs: int) -> float:
    arguments = [(url, statement, jobs // processes)] * processes
    seconds, made = common.side_by_side_processes(_insert, arguments)
    return sum(made) / seconds


class Listener:
    """One connection LISTENing on the jobs' channel and reading what comes, as an
    idle worker's does."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.heard = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            for _ in self.conn.notifies(timeout=0.2, stop_after=1000):
                self.heard += 1

    def settled(self, quiet: float = 1.0, timeout: float = 30.0) -> int:
        """How many were heard, once none has come for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        last, last_change = self.heard, time.monotonic()
        while time.monotonic() - last_change < quiet and time.monotonic() < deadline:
            time.sleep(0.05)
            if self.heard != last:
                last, last_change = self.heard, time.monotonic()
        return self.heard

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,4,8", help="process counts")
    parser.add_argument("--jobs", type=int, default=2400, help="jobs a run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    url = common.fresh_due_url("postgres", "notify_cost")
    sent, listening = statements(url)
    listener = Listener(listening)
    rates: dict[tuple[int, str], list[float]] = {}
    try:
        for run in range(args.runs):
            for n in counts:
                for shape in SHAPES if run % 2 == 0 else SHAPES[::-1]:  # none always first
                    rates.setdefault((n, shape), []).append(one_run(url, sent[shape], n, args.jobs))
        # + each one's first, for each shape that notifies
        expected = len(NOTIFYING) * args.runs * sum(n * (args.jobs // n) + n for n in counts)
        heard = listener.settled()
    finally:
        listener.close()
    print(
        f"| processes | {SHAPES[0]}, jobs/s | {SHAPES[1]}, jobs/s | {SHAPES[2]}, jobs/s "
        "| without ÷ with | apart ÷ with |"
    )
    print("|---|---|---|---|---|---|")
    for n in counts:
        cells = []
        for shape in SHAPES:
            found = rates[n, shape]
            cells.append(f"{statistics.median(found):,.0f} [{min(found):,.0f}-{max(found):,.0f}]")
        base = statistics.median(rates[n, SHAPES[0]])
        without, apart = (statistics.median(rates[n, shape]) / base for shape in SHAPES[1:])
        print(f"| {n} | {cells[0]} | {cells[1]} | {cells[2]} | {without:.2f} | {apart:.2f} |")
    print(f"\nnotifications heard: {heard:,} of {expected:,} sent")
    return 0 if heard == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
