"""Enqueue in a SQLAlchemy AsyncSession (asyncpg): what does it cost per job?

    .venv/bin/python bench/sqlalchemy_bench.py [--jobs 2000] [--runs 5] [--quick]

PostgreSQL, a fresh database `due_bench_sqlalchemy` (a run with
DUE_BENCH_SCRATCH keeps its own, as every benchmark's). One process, one
event loop; each kind enqueues --jobs jobs one at a time, the kinds in turn
(the order rotating from run to run), --runs each:

own       `await task.aenqueue(n)`: due's own connection of the loop, one
          autocommitted statement per job (the comparison).
session   `async with AsyncSession(...)`: `await
          task.options(connection=session).aenqueue(n)` then `commit()`:
          a request whose only write is the job (BEGIN, INSERT, COMMIT
          through asyncpg).
row       the same session with the request's own write and no job: an
          INSERT of a signup row, then `commit()`.
row+job   the request's row and its job in one transaction: the INSERT,
          the enqueue, `commit()`.

Time per job from the database's stamps: the first to the last job's
`created_at` (own, session), or signup row's `made_at` (`clock_timestamp()`;
row, row+job), divided by the jobs between them. The cost of enqueueing in
the session is `row+job - row` (what the job adds to a request that writes
anyway), set against `own` (target: within 20 %); `session/own` is the whole
transaction's. Medians [min-max] over the runs; one JSON line per run in
bench/results/results.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

PG_DB = f"{common.DB_PREFIX}sqlalchemy"
KINDS = ("own", "session", "row", "row+job")


async def one_run(app: Any, task: Any, sessions: Any, kind: str, n: int) -> dict[str, Any]:
    from sqlalchemy import text

    insert = text("INSERT INTO signups (email) VALUES (:email)")
    for i in range(n):
        if kind == "own":
            await task.aenqueue(i)
            continue
        async with sessions() as session:
            if kind != "session":
                await session.execute(insert, {"email": f"user{i}@example.com"})
            if kind != "row":
                await task.options(connection=session).aenqueue(i)
            await session.commit()
    stamps = (
        "SELECT min(created_at), max(created_at), count(*) FROM due_jobs"
        if kind in ("own", "session")
        else "SELECT min(made_at), max(made_at), count(*) FROM signups"
    )
    first, last, count = common.pg_row(PG_DB, stamps)
    jobs = common.pg_scalar(PG_DB, "SELECT count(*) FROM due_jobs")
    seconds = (last - first).total_seconds()
    common.pg_execute(PG_DB, "TRUNCATE due_jobs, signups")
    return {
        "kind": kind,
        "jobs": jobs,
        "rows": count if kind.startswith("row") else 0,
        "seconds": seconds,
        "us_per_job": seconds / (count - 1) * 1e6,
    }


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    import due

    common.recreate_pg_db(PG_DB)
    url = common.pg_url(PG_DB)
    app = due.App(url)
    app.migrate()
    common.pg_execute(
        PG_DB,
        "CREATE TABLE signups (id bigserial PRIMARY KEY, email text NOT NULL,"
        " made_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    )

    @app.task(name="welcome")
    def welcome(n: int) -> None: ...

    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
    sessions = async_sessionmaker(engine)
    await welcome.aenqueue(0)  # the loop's own connection, opened
    common.pg_execute(PG_DB, "TRUNCATE due_jobs")
    records = []
    try:
        for run in range(args.runs):
            shift = run % len(KINDS)
            for kind in KINDS[shift:] + KINDS[:shift]:
                record = await one_run(app, welcome, sessions, kind, args.jobs)
                record.update(bench="sqlalchemy", run=run, backend="postgres")
                common.save(record)
                records.append(record)
    finally:
        await engine.dispose()
        app.close()
    return records


def report(records: list[dict[str, Any]]) -> None:
    per = {kind: [r["us_per_job"] for r in records if r["kind"] == kind] for kind in KINDS}
    runs = min(len(values) for values in per.values())
    marginal = [per["row+job"][i] - per["row"][i] for i in range(runs)]
    print(f"{'kind':<22} {'us per job, median [min-max]':>32}")
    for kind in KINDS:
        print(f"{kind:<22} {_shown(per[kind]):>32}")
    print(f"{'row+job - row':<22} {_shown(marginal):>32}")
    own = common.median(per["own"]) or 0.0
    print(f"(row+job - row)/own: {(common.median(marginal) or 0) / own:.2f}")
    print(f"session/own: {(common.median(per['session']) or 0) / own:.2f}")


def _shown(values: list[float]) -> str:
    s = common.spread(values)
    return f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.runs = 50, 1
    report(asyncio.run(measure(args)))


if __name__ == "__main__":
    main()
