"""The visibility benchmark: `due status`, `due check` and a `/metrics` scrape on a
big table.

    .venv/bin/python bench/visibility_bench.py [--backend sqlite|postgres|both]
                                               [--finished 1000000] [--queued 100000]
                                               [--future 0] [--repeat 15]

The table holds --finished finished jobs (97% succeeded, 2% failed, 1% cancelled,
finished over the last 7 days), --queued queued jobs (half due, half delayed by up
to an hour), --future jobs scheduled over the next month at higher priorities
(the issue's ten million timers: `--future 10000000`), over 3 queues and 10
tasks, counts and durations as two days of busy minutes and hours would leave
them, and 5 schedules. Rows are written by SQL, not through enqueue: this
measures reading, not filling.

status   `due status` in-process (click's runner: the App, its connection, every
         query and the rendering; not the interpreter's start-up)
check    `due check`, the same way
metrics  GET /metrics from a running `due metrics` process (one scrape: every
         collector's queries and the exposition)
process  `due status` as a new process, start-up included (for reference)
overview the dashboard's overview page, in-process (Starlette's test client: the
         request, every query and the rendering)
jobs     the dashboard's jobs page: the newest 50, then filtered by state
         (failed: 2% of the table), then the page after a job a third down the table

Each is run --repeat times after one warm-up; the median and max are reported
in ms. The issue's bar: each under 200 ms. One JSON line per result on stdout,
also appended to bench/results/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from click.testing import CliRunner

import common
import due
from due.cli.main import main as due_command

QUEUES = ("default", "emails", "bulk")
TASKS = 10
DAY = 86400.0

SQLITE_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
INSERT INTO due_jobs (task, queue, state, payload, run_at, attempt, max_attempts,
                      created_at, started_at, finished_at, last_error, priority, timer)
SELECT 'task_' || (i % {tasks}), {queue}, {state}, '{{"args":[],"kwargs":{{}}}}',
       {run_at}, {attempt}, 3, {run_at} - 1, {started}, {finished}, {error}, {priority},
       {state} = 'queued' AND {run_at} > {now}
FROM n
"""

POSTGRES_FILL = """
INSERT INTO due_jobs (task, queue, state, payload, run_at, attempt, max_attempts,
                      created_at, started_at, finished_at, last_error, priority, timer)
SELECT 'task_' || (i % {tasks}), {queue}, {state}, '{{"args":[],"kwargs":{{}}}}'::jsonb,
       to_timestamp({run_at}), {attempt}, 3, to_timestamp({run_at} - 1),
       to_timestamp({started}), to_timestamp({finished}), {error}, {priority},
       {state} = 'queued' AND {run_at} > {now}
FROM generate_series(1, {count}) AS i
"""


def job_rows(now: float, finished: int, queued: int, future: int) -> dict[str, dict[str, Any]]:
    """The SQL expressions (over i) of each column, for one fill statement (a
    queued job due later is a timer, as enqueue writes it)."""
    queue = "CASE i % 3 WHEN 0 THEN 'default' WHEN 1 THEN 'emails' ELSE 'bulk' END"
    finished_at = f"{now} - (i % 604800)"
    return {
        "finished": dict(
            count=finished,
            queue=queue,
            state="CASE WHEN i % 100 < 97 THEN 'succeeded' "
            "WHEN i % 100 < 99 THEN 'failed' ELSE 'cancelled' END",
            run_at=f"{finished_at} - 2",
            attempt="1",
            started=f"{finished_at} - 1",
            finished=finished_at,
            error="CASE WHEN i % 100 BETWEEN 97 AND 98 THEN 'ValueError: bad input' END",
            priority="0",
        ),
        "queued": dict(
            count=queued,
            queue=queue,
            state="'queued'",
            run_at=f"{now} + (CASE WHEN i % 2 = 0 THEN -1 ELSE 1 END) * (i % 3600)",
            attempt="0",
            started="NULL",
            finished="NULL",
            error="NULL",
            priority="0",
        ),
        "future": dict(
            count=future,
            queue=queue,
            state="'queued'",
            run_at=f"{now} + 3600 + (i % {30 * int(DAY)})",
            attempt="0",
            started="NULL",
            finished="NULL",
            error="NULL",
            priority="1 + i % 9",
        ),
    }


def stats_rows(now: float) -> list[tuple[Any, ...]]:
    """Two hours of minutes and two days of hours for every task, outcome and bucket
    a busy system fills (the most the folding keeps before one row per key)."""
    rows = []
    minute_now = int(now) // 60 * 60
    hour_now = int(now) // 3600 * 3600
    for task in range(TASKS):
        queue = QUEUES[task % 3]
        for outcome in ("succeeded", "failed", "retried"):
            for bucket in range(6):
                key = (f"task_{task}", queue, outcome, bucket, 0)
                for m in range(120):
                    rows.append(("minute", minute_now - 60 * m, *key, 40, 12.5))
                for h in range(2, 48):
                    rows.append(("hour", hour_now - 3600 * h, *key, 2400, 750.0))
                rows.append(("all", 0, *key, 100000, 31250.0))
    return rows


def make_app(url: str) -> due.App:
    app = due.App(url)

    @app.task(name="task_0")
    def task_0() -> None: ...

    for n in range(5):
        app.schedule(f"report-{n}", cron=f"{n} * * * *", task=task_0)
    return app


def fill(backend: str, url: str, rows: dict[str, int]) -> None:
    app = make_app(url)
    app.migrate()
    app.close()
    now = time.time()
    template = SQLITE_FILL if backend == "sqlite" else POSTGRES_FILL
    statements = [
        template.format(tasks=TASKS, now=now, **columns)
        for columns in job_rows(now, rows["finished"], rows["queued"], rows["future"]).values()
        if columns["count"] > 0
    ]
    stats = stats_rows(now)
    if backend == "sqlite":
        import sqlite3

        connection = sqlite3.connect(url.split(":///", 1)[1])
        with connection:
            for statement in statements:
                connection.execute(statement)
            connection.executemany(
                "INSERT INTO due_job_stats VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", stats
            )
        connection.execute("ANALYZE")
        connection.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        for statement in statements:
            connection.execute(statement)
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO due_job_stats "
                "VALUES (%s, to_timestamp(%s), %s, %s, %s, %s, %s, %s, %s)",
                stats,
            )
        connection.execute("VACUUM ANALYZE due_jobs")
        connection.execute("ANALYZE due_job_stats")


def timed(action: Callable[[], None], repeat: int) -> dict[str, Any]:
    action()  # warm-up: the operating system's and the database's caches
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return {
        "median_ms": round(statistics.median(samples), 1),
        "max_ms": round(max(samples), 1),
        "n": repeat,
    }


def run_command(url: str, *arguments: str) -> Callable[[], None]:
    runner = CliRunner()

    def action() -> None:
        result = runner.invoke(due_command, ["--url", url, *arguments])
        if result.exit_code not in (0, 1, 2):
            raise RuntimeError(
                f"due {' '.join(arguments)} exited {result.exit_code}: "
                f"{result.output}{result.exception!r}"
            )

    return action


def run_process(url: str) -> Callable[[], None]:
    def action() -> None:
        subprocess.run(
            [sys.executable, "-m", "due", "--url", url, "status"],
            check=True,
            capture_output=True,
            timeout=60,
        )

    return action


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(url: str, repeat: int) -> dict[str, Any]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "due", "--url", url, "metrics", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert server.stderr is not None
        line = server.stderr.readline().decode()
        if "serving metrics" not in line:
            raise RuntimeError(f"due metrics did not start: {line}")
        address = f"http://127.0.0.1:{port}/metrics"

        def action() -> None:
            with urllib.request.urlopen(address, timeout=60) as response:
                body = response.read()
            if b"due_queue_oldest_due_age_seconds" not in body:
                raise RuntimeError("the scrape lacks due_queue_oldest_due_age_seconds")

        return timed(action, repeat)
    finally:
        server.terminate()
        server.wait(timeout=30)


def dashboard_pages(
    backend: str, url: str, repeat: int, rows: dict[str, int]
) -> list[dict[str, Any]]:
    from starlette.testclient import TestClient

    app = due.App(url)
    middle = sum(rows.values()) // 3
    pages = {
        "dashboard_overview": "/",
        "dashboard_jobs": "/jobs",
        "dashboard_jobs_failed": "/jobs?state=failed",
        "dashboard_jobs_page": f"/jobs?before={middle}",
    }
    results = []
    with TestClient(app.dashboard(), base_url="http://127.0.0.1") as client:
        for test, path in pages.items():

            def action(path: str = path) -> None:
                answer = client.get(path)
                if answer.status_code != 200:
                    raise RuntimeError(f"GET {path}: {answer.status_code}")

            results.append(record(backend, test, timed(action, repeat), rows))
    app.close()
    return results


def url_for(backend: str) -> str:
    if backend == "postgres":
        database = f"{common.DB_PREFIX}due_visibility"
        common.recreate_pg_db(database)
        return common.pg_url(database)
    path = common.fresh_sqlite_path(common.WORK_DIR / "db" / "due_visibility.db")
    return f"sqlite:///{path}"


def record(
    backend: str, test: str, figures: dict[str, Any], rows: dict[str, int]
) -> dict[str, Any]:
    result = {
        "lib": "due",
        "backend": backend,
        "test": f"visibility_{test}",
        "setting": f"{rows['finished']} finished, {rows['queued']} queued, {rows['future']} future",
        "version": due.__version__,
        "ts": round(time.time(), 3),
        "value": figures["median_ms"],
        "unit": "ms",
        "values": figures,
        # a new process pays the interpreter's start-up: no bar for it
        "checks": {}
        if test.startswith("process")
        else {"under_200_ms": figures["median_ms"] < 200},
    }
    line = json.dumps(result)
    print(line, flush=True)
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with (common.RESULTS_DIR / "results.jsonl").open("a") as out:
        out.write(line + "\n")
    return result


def measure(backend: str, rows: dict[str, int], repeat: int) -> list[dict[str, Any]]:
    url = url_for(backend)
    started = time.perf_counter()
    fill(backend, url, rows)
    print(f"# {backend}: filled in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    return [
        *dashboard_pages(backend, url, repeat, rows),
        record(backend, "status", timed(run_command(url, "status"), repeat), rows),
        record(backend, "check", timed(run_command(url, "check"), repeat), rows),
        record(backend, "metrics", scrape(url, repeat), rows),
        record(backend, "process_status", timed(run_process(url), max(3, repeat // 3)), rows),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="both", choices=["sqlite", "postgres", "both"])
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--future", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    common.exit_on_sigterm()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results = []
    for backend in backends:
        rows = {"finished": args.finished, "queued": args.queued, "future": args.future}
        results.extend(measure(backend, rows, args.repeat))
    print("\n| backend | test | median | max | under 200 ms |\n|---|---|---|---|---|")
    for row in results:
        values = row["values"]
        print(
            f"| {row['backend']} | {row['test']} | {values['median_ms']} ms | "
            f"{values['max_ms']} ms | {row['checks'].get('under_200_ms', '-')} |"
        )


if __name__ == "__main__":
    main()
