"""Where a job's time goes on PostgreSQL: CPU per job on each side, by shape and batch size.

    .venv/bin/python bench/costs.py [--jobs 20000] [--rounds 5] [--batches 1,10,100,400]

The drain benchmark gives a rate; this gives its parts. Each measurement drains a backlog of
no-op jobs in claim-and-acknowledge cycles of `batch` jobs, from one process, with no job
bodies and no worker around them, and reads from /proc the CPU time this process (the
client) and the PostgreSQL server's processes spent per job. Three shapes, interleaved round
by round (the machine's noise falls on all alike):

due         the worker's own path: the claim and the acknowledgement as the worker's event
            loop sends them (the loop lane: one autocommitted statement each, with leases,
            fencing tokens, per-task counts, wake-ups), and the client's work of turning rows
            into jobs and outcomes into arrays
due-table   the bare loop's two statements, run on due's table (its row, its indexes)
narrow-table  the same two statements on due's table split in two: the columns a claim,
            a heartbeat and an end change in one table with the indexes on them, the
            job's record (task, payload, results, errors, progress ...) in another that
            the claim joins for the payload; a sketch of the narrow hot table, not a store
bare        the bare loop itself (bench/limits/raw_pg.py): its statements on its table

due against due-table is what due's statements cost beyond the simplest claim and
acknowledgement of the same rows; due-table against bare is what due's wider row and its
indexes cost, and narrow-table against due-table how much of that a narrow hot row would
take back. Over the batch sizes, each side's CPU per job is fitted as
`per job + per cycle / batch` (least squares): what a cycle costs whatever it carries
(statements, commits, round trips) and what each job adds.

Then enqueue, per job: `task.enqueue` against the bare loop's one-row INSERT, `await
task.aenqueue` against the same INSERT on an async connection (each one after the other, as
a request handler enqueues), and `app.enqueue_many` (1,000 a call) against the bare
multi-row INSERT: wall time, the client's CPU and the server's. For the bulk insert also the
statement alone, the rows made ready beforehand: due's `insert_jobs` into due's table
(due-table) and the same rows into the two narrow tables in one statement (narrow-table).

One JSON line per measurement (bench/results/results.jsonl), then Markdown tables.
bench/NOTES.md reads them. PostgreSQL only: on SQLite client and database are one process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import psycopg

import common
import due
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion
from limits import raw_pg

SHAPES = ("due", "due-table", "narrow-table", "bare")
QUEUE = "default"
TASK = "cost_job"
# raw_pg's two statements, on due's table: the same claim order and the same rows.
DUE_TABLE_CLAIM = """
UPDATE due_jobs SET state = 'running', lease_token = lease_token + 1
WHERE id = ANY(ARRAY(
    SELECT id FROM due_jobs
    WHERE queue = 'default' AND state = 'queued' AND NOT held AND NOT timer AND run_at <= now()
    ORDER BY priority DESC, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED))
RETURNING id, payload
"""
DUE_TABLE_DONE = (
    "UPDATE due_jobs SET state = 'succeeded', lease_token = lease_token + 1 WHERE id = ANY(%s)"
)
PAYLOAD = json.dumps(["ref", 1733000000.123, 0.0])

# The narrow sketch: the columns every claim, end and rescue writes whatever the job
# returns, and the keys a claim or an insert tests, in the hot table; the rest (a
# result, errors, progress too) is the job's record, so a job that returns nothing,
# as here, is the sketch's best case.
HOT_COLUMNS = (
    "id", "queue", "priority", "state", "run_at", "timer", "held", "attempt", "max_attempts",
    "lease_token", "lease_expires_at", "worker", "lost_leases", "started_at", "finished_at",
    "cancel_requested", "dedupe_key", "limits",
)  # fmt: skip
NARROW_CLAIM = """
WITH claimed AS (
    UPDATE narrow_jobs SET state = 'running', lease_token = lease_token + 1
    WHERE id = ANY(ARRAY(
        SELECT id FROM narrow_jobs
        WHERE queue = 'default' AND state = 'queued' AND NOT held AND NOT timer
              AND run_at <= now()
        ORDER BY priority DESC, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED))
    RETURNING id)
SELECT claimed.id, record.payload FROM claimed JOIN narrow_records AS record USING (id)
"""
NARROW_DONE = (
    "UPDATE narrow_jobs SET state = 'succeeded', lease_token = lease_token + 1 WHERE id = ANY(%s)"
)
# insert_jobs' row and arrays, into both tables in one statement. Every row here is
# keyless, so each gets its record; a real split would write the record only for a
# row its key let in.
NARROW_INSERT = """
WITH j AS (
    SELECT * FROM unnest(%(id)b::bigint[], %(task)b::text[], %(queue)b::text[],
                         %(priority)b::int[], %(payload)b::text[], %(run_at)b::timestamptz[],
                         %(max_attempts)b::int[], %(key)b::text[], %(unique_for)b::float8[],
                         %(stuck_after)b::float8[])
         AS j(id, task, queue, priority, payload, run_at, max_attempts, key, unique_for,
              stuck_after)),
hot AS (
    INSERT INTO narrow_jobs (id, queue, priority, run_at, timer, max_attempts, dedupe_key)
    SELECT id, queue, priority, run_at, run_at > %(now)s::timestamptz, max_attempts, key FROM j
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING)
INSERT INTO narrow_records (id, task, payload, key, unique_for, stuck_after, created_at)
SELECT id, task, payload::jsonb, key, unique_for, stuck_after, %(now)s::timestamptz FROM j
"""


class NarrowSchema(NamedTuple):
    ddl: str
    columns: dict[str, list[str]]
    """Each table's columns."""
    left_out: list[str]
    """due's indexes that name columns of both tables (a real split would rethink them)."""


def narrow_schema(conn: psycopg.Connection[Any]) -> NarrowSchema:
    """due_jobs split in two, from its catalogue: each column with its type, default and
    NOT NULL; each CHECK and each index with the table whose columns it names; and the
    table's storage settings (its fillfactor decides where a row's new version goes)."""
    columns = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(d.adbin, d.adrelid)
           FROM pg_attribute a
           LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
           WHERE a.attrelid = 'due_jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped
           ORDER BY a.attnum"""
    ).fetchall()
    names = [name for name, *_ in columns]
    missing = set(HOT_COLUMNS) - set(names)
    if missing:
        raise SystemExit(f"costs.py: due_jobs has no column {sorted(missing)}: update HOT_COLUMNS")
    hot = set(HOT_COLUMNS)
    split: dict[str, list[str]] = {"narrow_jobs": [], "narrow_records": []}
    column_ddl: dict[str, list[str]] = {table: [] for table in split}
    for name, kind, not_null, default in columns:
        home = "narrow_jobs" if name in hot else "narrow_records"
        for table in list(split) if name == "id" else [home]:
            split[table].append(name)
            column_ddl[table].append(
                f"{name} {kind}{' NOT NULL' if not_null else ''}"
                f"{f' DEFAULT {default}' if default else ''}"
            )

    def table_of(text: str) -> str | None:
        """The table holding every column the text names; None if it names both's.
        Names matched as words in the catalogue's own text: enough for due's, whose
        literals ('queued', 'running' ...) are no column's name."""
        named = {name for name in names if re.search(rf"\b{name}\b", text)}
        if named <= hot:
            return "narrow_jobs"
        return "narrow_records" if not named & (hot - {"id"}) else None

    checks = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = 'due_jobs'::regclass AND contype = 'c'"
    ).fetchall()
    for (check,) in checks:
        table = table_of(check)
        if table is not None:
            column_ddl[table].append(check)
    (options,) = conn.execute(
        "SELECT coalesce(array_to_string(reloptions, ', '), '') FROM pg_class "
        "WHERE oid = 'due_jobs'::regclass"
    ).fetchone() or ("",)
    storage = f" WITH ({options})" if options else ""
    ddl = [
        f"CREATE TABLE {table} ({', '.join(cols)}, PRIMARY KEY (id)){storage}"
        for table, cols in column_ddl.items()
    ]
    placed: dict[str, str | None] = {}
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'due_jobs' "
        "AND indexname <> 'due_jobs_pkey' ORDER BY indexname"
    ).fetchall()
    for index, definition in indexes:
        table = placed[index] = table_of(definition.split(" USING ", 1)[1])
        if table is not None:
            ddl.append(definition.replace(f"INDEX {index} ON public.due_jobs", f"INDEX ON {table}"))
    if placed.get("due_jobs_claim") != "narrow_jobs":
        raise SystemExit("costs.py: due_jobs_claim is not on narrow_jobs: update HOT_COLUMNS")
    left_out = [index for index, table in placed.items() if table is None]
    return NarrowSchema(";\n".join(ddl), split, left_out)


def make_app(url: str) -> tuple[due.App, due.Task[Any, Any]]:
    app = due.App(url)

    @app.task(name=TASK)
    async def cost_job(ref: str, t_ref: float, sleep_s: float) -> None:
        return None

    return app, cost_job


Reading = tuple[float, float, float, int]


class Meter:
    """Between two reads: wall time, CPU seconds of this process and of the server's
    processes, and the bytes of WAL the server wrote (what every change costs it
    to log, and to flush at each commit)."""

    def __init__(self, db: str) -> None:
        self.server = common.postmaster_pid(db)
        if self.server is None:
            raise SystemExit("costs.py reads the server's CPU from /proc: run it on its host")
        self.conn = psycopg.connect(common.pg_url(db), autocommit=True)

    def read(self) -> Reading:
        server = common.cpu_seconds(common.process_tree(self.server))
        wal = self.conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'").fetchone()
        return time.perf_counter(), time.process_time(), server, int(wal[0])  # type: ignore[index]

    @staticmethod
    def per_job(start: Reading, end: Reading, n: int) -> dict[str, Any]:
        wall, client, server = (1e6 * (b - a) / n for a, b in zip(start[:3], end[:3], strict=True))
        return {
            "wall_us": round(wall, 2),
            "client_us": round(client, 2),
            "server_us": round(server, 2),
            "wal_bytes": round((end[3] - start[3]) / n),
        }


# --------------------------------------------------------------------------- drain cycles


class Databases:
    """One database holding due's schema and the bare loop's table."""

    def __init__(self) -> None:
        self.db = f"{common.DB_PREFIX}costs"
        common.recreate_pg_db(self.db)
        self.url = common.pg_url(self.db)
        self.app, self.task = make_app(self.url)
        self.app.migrate()
        self.conn = psycopg.connect(self.url, autocommit=True)
        self.conn.execute(raw_pg.SCHEMA)
        self.narrow = narrow_schema(self.conn)
        self.conn.execute(self.narrow.ddl)
        self.meter = Meter(self.db)

    def reset(self, shape: str, n: int) -> None:
        """An empty table for the shape, then its backlog of n jobs, then a checkpoint
        (so that every shape pays the same first writes of each page after one)."""
        self.conn.execute("TRUNCATE due_jobs, due_job_stats, jobs, narrow_jobs, narrow_records")
        for start in range(0, n, common.CHUNK):
            count = min(common.CHUNK, n - start)
            if shape == "bare":
                self.conn.execute(raw_pg.INSERT_MANY, ([PAYLOAD] * count,))
            else:
                self.app.enqueue_many(
                    [self.task.request("ref", 1733000000.123, 0.0) for _ in range(count)]
                )
        if shape == "narrow-table":  # the same rows, split
            for table, names in self.narrow.columns.items():
                columns = ", ".join(names)
                self.conn.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM due_jobs")
            self.conn.execute("TRUNCATE due_jobs")
        self.conn.execute("ANALYZE due_jobs, jobs, narrow_jobs, narrow_records")
        self.conn.execute("CHECKPOINT")

    def close(self) -> None:
        self.conn.close()
        self.meter.conn.close()
        self.app.close()


def drain_due(dbs: Databases, batch: int) -> dict[str, Any]:
    """Cycles of claim and acknowledgement through the worker's loop lane."""
    store = dbs.app.store
    request = ClaimRequest(QUEUE, batch, "costs", 30.0, [TASK], {})

    async def cycle(lane: Any) -> int:
        jobs = await store.job_claim_on_loop(lane, request)
        if not jobs:
            return 0
        ends = [Completion(j.id, j.lease_token, JobState.SUCCEEDED, seconds=1e-4) for j in jobs]
        written = await store.job_complete_on_loop(lane, ends)
        if written is None or len(written) != len(ends):
            raise RuntimeError(f"acknowledged {written!r} of {len(ends)} jobs")
        return len(jobs)

    async def cycles() -> dict[str, Any]:
        lane = store.loop_lane(2)
        if lane is None:
            raise SystemExit("costs.py needs PostgreSQL (the loop lane)")
        await lane.open()
        try:
            await cycle(lane)  # first use: connections, plans (not measured)
            start, done = dbs.meter.read(), 0
            while moved := await cycle(lane):
                done += moved
            return Meter.per_job(start, dbs.meter.read(), done)
        finally:
            await lane.close()

    return asyncio.run(cycles())


def drain_statements(dbs: Databases, claim: str, done_sql: str, batch: int) -> dict[str, Any]:
    """Cycles of two bare statements on one autocommitted connection."""
    with psycopg.connect(dbs.url, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")  # as the lane's sessions

        def cycle() -> int:
            rows = conn.execute(claim, (batch,)).fetchall()
            if rows:
                conn.execute(done_sql, ([row[0] for row in rows],))
            return len(rows)

        cycle()  # first use: plans (not measured)
        start, done = dbs.meter.read(), 0
        while moved := cycle():
            done += moved
        return Meter.per_job(start, dbs.meter.read(), done)


UNFINISHED = {  # what a drain leaves that it should have ended
    "due": "SELECT count(*) FROM due_jobs WHERE state <> 'succeeded'",
    "due-table": "SELECT count(*) FROM due_jobs WHERE state <> 'succeeded'",
    "narrow-table": "SELECT count(*) FROM narrow_jobs WHERE state <> 'succeeded'",
    "bare": "SELECT count(*) FROM jobs WHERE state <> 'done'",
}


def measure_drain(dbs: Databases, shape: str, batch: int, n: int) -> dict[str, Any]:
    dbs.reset(shape, n)
    if shape == "due":
        measured = drain_due(dbs, batch)
    elif shape == "due-table":
        measured = drain_statements(dbs, DUE_TABLE_CLAIM, DUE_TABLE_DONE, batch)
    elif shape == "narrow-table":
        measured = drain_statements(dbs, NARROW_CLAIM, NARROW_DONE, batch)
    else:
        measured = drain_statements(dbs, raw_pg.CLAIM, raw_pg.DONE, batch)
    (left,) = dbs.conn.execute(UNFINISHED[shape]).fetchone() or (None,)
    if left != 0:  # e.g. claimed rows the claim did not return
        raise SystemExit(f"costs.py: the {shape} drain left {left} of {n} jobs unfinished")
    return measured


def fit(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """(per job, per cycle) from (batch, cost per job) points: cost = a + b / batch."""
    xs = [1.0 / batch for batch, _ in points]
    ys = [cost for _, cost in points]
    if len(set(xs)) < 2:
        return ys[0], 0.0
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


# --------------------------------------------------------------------------- enqueue


def measure_enqueue(dbs: Databases, shape: str, mode: str, n: int) -> dict[str, Any]:
    dbs.conn.execute("TRUNCATE due_jobs, jobs, narrow_jobs, narrow_records")
    dbs.conn.execute("CHECKPOINT")
    if shape in ("due-table", "narrow-table"):
        return insert_statement(dbs, shape, n)
    if shape == "due":
        task, app = dbs.task, dbs.app
        if mode == "single":
            task.enqueue("warm-up", 0.0, 0.0)
            start = dbs.meter.read()
            for i in range(n):
                task.enqueue(f"ref{i}", 1733000000.123, 0.0)
        elif mode == "single-async":
            return asyncio.run(aenqueue_due(dbs, n))
        else:
            start = dbs.meter.read()
            for offset in range(0, n, common.CHUNK):
                app.enqueue_many(
                    [
                        task.request(f"ref{i}", 1733000000.123, 0.0)
                        for i in range(offset, min(n, offset + common.CHUNK))
                    ]
                )
        return Meter.per_job(start, dbs.meter.read(), n)
    if mode == "single-async":
        return asyncio.run(aenqueue_bare(dbs, n))
    with psycopg.connect(dbs.url, autocommit=True) as conn:
        if mode == "single":
            conn.execute(raw_pg.INSERT_ONE, (PAYLOAD,))
            start = dbs.meter.read()
            for i in range(n):
                conn.execute(raw_pg.INSERT_ONE, (json.dumps([f"ref{i}", 1733000000.123, 0.0]),))
        else:
            start = dbs.meter.read()
            for offset in range(0, n, common.CHUNK):
                payloads = [
                    json.dumps([f"ref{i}", 1733000000.123, 0.0])
                    for i in range(offset, min(n, offset + common.CHUNK))
                ]
                conn.execute(raw_pg.INSERT_MANY, (payloads,))
        return Meter.per_job(start, dbs.meter.read(), n)


def insert_statement(dbs: Databases, shape: str, n: int) -> dict[str, Any]:
    """A bulk enqueue's statement alone, 1,000 rows a statement, autocommitted: due's
    insert_jobs into its table, or the same arrays into the narrow tables. The rows are
    made in the measured time, alike for both: compare the server's side."""
    statement = (
        dbs.app.store.backend._queries["insert_jobs"] if shape == "due-table" else NARROW_INSERT
    )
    with psycopg.connect(dbs.url, autocommit=True) as conn:
        conn.execute(statement, bulk_params(0, 1))  # first use: the session's caches
        conn.execute("TRUNCATE due_jobs, narrow_jobs, narrow_records")
        start = dbs.meter.read()
        for offset in range(0, n, common.CHUNK):
            conn.execute(statement, bulk_params(offset, min(common.CHUNK, n - offset)))
        measured = Meter.per_job(start, dbs.meter.read(), n)
    tables = ("due_jobs",) if shape == "due-table" else ("narrow_jobs", "narrow_records")
    for table in tables:
        (rows,) = dbs.conn.execute(f"SELECT count(*) FROM {table}").fetchone() or (None,)
        if rows != n:
            raise SystemExit(f"costs.py: the {shape} insert left {rows} of {n} rows in {table}")
    return measured


def bulk_params(offset: int, count: int) -> dict[str, Any]:
    """insert_jobs' arrays for `count` keyless jobs due now, ids from offset + 1."""
    now = datetime.now(UTC)
    ids = range(offset + 1, offset + count + 1)
    return {
        "id": list(ids),
        "task": [TASK] * count,
        "queue": [QUEUE] * count,
        "priority": [0] * count,
        "payload": [json.dumps({"args": [f"ref{i}", 1733000000.123, 0.0]}) for i in ids],
        "run_at": [now] * count,
        "max_attempts": [1] * count,
        "key": [None] * count,
        "unique_for": [None] * count,
        "stuck_after": [None] * count,
        "limits": [None] * count,
        "now": now,
    }


async def aenqueue_due(dbs: Databases, n: int) -> dict[str, Any]:
    """`await task.aenqueue(...)` one after the other, as a request handler does."""
    await dbs.task.aenqueue("warm-up", 0.0, 0.0)
    start = dbs.meter.read()
    for i in range(n):
        await dbs.task.aenqueue(f"ref{i}", 1733000000.123, 0.0)
    return Meter.per_job(start, dbs.meter.read(), n)


async def aenqueue_bare(dbs: Databases, n: int) -> dict[str, Any]:
    """The bare one-row INSERT on an async connection, one after the other."""
    async with await psycopg.AsyncConnection.connect(dbs.url, autocommit=True) as conn:
        await conn.execute(raw_pg.INSERT_ONE, (PAYLOAD,))
        start = dbs.meter.read()
        for i in range(n):
            await conn.execute(raw_pg.INSERT_ONE, (json.dumps([f"ref{i}", 1733000000.123, 0.0]),))
        return Meter.per_job(start, dbs.meter.read(), n)


# --------------------------------------------------------------------------- report


def median_of(records: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in records)


def drain_table(results: dict[tuple[str, int], list[dict[str, Any]]], batches: list[int]) -> str:
    lines = [
        "### Drain cycles: CPU per job, us (median of the rounds)",
        "",
        "| shape | "
        + " | ".join(f"batch {b}: server / client" for b in batches)
        + " | fit server: per job + per cycle | fit client: per job + per cycle"
        + f" | WAL bytes per job, batch {batches[-1]} |",
        "|---|" + "---|" * (len(batches) + 3),
    ]
    for shape in SHAPES:
        cells, server_points, client_points = [], [], []
        for batch in batches:
            records = results.get((shape, batch), [])
            if not records:
                cells.append("-")
                continue
            server, client = median_of(records, "server_us"), median_of(records, "client_us")
            server_points.append((batch, server))
            client_points.append((batch, client))
            cells.append(f"{server:.1f} / {client:.1f}")
        fits = []
        for points in (server_points, client_points):
            per_job, per_cycle = fit(points) if points else (float("nan"), float("nan"))
            fits.append(f"{per_job:.1f} + {per_cycle:.0f}")
        largest = results.get((shape, batches[-1]), [])
        fits.append(f"{median_of(largest, 'wal_bytes'):,.0f}" if largest else "-")
        lines.append(f"| {shape} | " + " | ".join(cells + fits) + " |")
    return "\n".join(lines)


def enqueue_table(results: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    lines = [
        "### Enqueue: per job, us (median of the rounds)",
        "",
        "| mode | shape | wall | client CPU | server CPU | WAL bytes | jobs/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for (mode, shape), records in sorted(results.items()):
        wall = median_of(records, "wall_us")
        lines.append(
            f"| {mode} | {shape} | {wall:.1f} | {median_of(records, 'client_us'):.1f} | "
            f"{median_of(records, 'server_us'):.1f} | {median_of(records, 'wal_bytes'):,.0f} | "
            f"{1e6 / wall:,.0f} |"
        )
    return "\n".join(lines)


def keep(into: dict[Any, list[dict[str, Any]]], key: Any, rec: dict[str, Any], **what: Any) -> None:
    """A measurement, named by `what`: saved (results.jsonl) and kept for the tables."""
    rec |= {"bench": "costs", **what}
    common.save(rec)
    into.setdefault(key, []).append(rec)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=20000, help="jobs per drain measurement")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--batches", default="1,10,100,400", help="claim batch sizes")
    ap.add_argument("--single", type=int, default=2000, help="jobs per single-enqueue run")
    ap.add_argument("--bulk", type=int, default=20000, help="jobs per bulk-enqueue run")
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    dbs = Databases()
    drains: dict[tuple[str, int], list[dict[str, Any]]] = {}
    enqueues: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for round_ in range(args.rounds):
            for batch in batches:
                # A cycle of one job costs about a millisecond: fewer jobs at small batches.
                n = min(args.jobs, 2000 * batch)
                for shape in SHAPES:
                    rec = measure_drain(dbs, shape, batch, n)
                    keep(drains, (shape, batch), rec, test="drain", shape=shape, batch=batch,
                         jobs=n, round=round_)  # fmt: skip
            modes = (("single", args.single), ("single-async", args.single), ("bulk", args.bulk))
            for mode, n in modes:
                for shape in SHAPES if mode == "bulk" else ("due", "bare"):
                    rec = measure_enqueue(dbs, shape, mode, n)
                    keep(enqueues, (mode, shape), rec, test="enqueue", mode=mode, shape=shape,
                         jobs=n, round=round_)  # fmt: skip
    finally:
        dbs.close()
    print()
    print(drain_table(drains, batches))
    if dbs.narrow.left_out:
        both = ", ".join(dbs.narrow.left_out)
        print(f"\n(narrow-table: without the indexes naming columns of both tables: {both})")
    print()
    print(enqueue_table(enqueues))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
