"""Long work: a backfill over a large table, split into pieces.

`plan_backfill` splits the `events` table into ranges of ids and spawns one
`backfill_range` piece per range. It then waits, holding no worker slot, and
`backfill_finished` runs once when the last piece has ended, with a summary.

Each piece is idempotent (it sets a column from another: doing a row twice does
no harm) and saves a checkpoint every 1,000 rows, so a retry after a crash or a
lost lease resumes where the last attempt stopped instead of starting over. Its
progress rides on the heartbeats: `due status` draws a bar per running piece,
and `due jobs --stuck` lists a piece whose progress stopped moving for a minute.

    plan_backfill.enqueue(chunk=10_000)
    due pause backfill      # the pieces not yet started wait; running ones finish
    due resume backfill
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

from demo_app import app

import due

EVENTS_DATABASE = os.environ.get("DEMO_EVENTS_DATABASE", "events.db")
CHECKPOINT_EVERY = 1_000
ROW_COST_SECONDS = 0.0004  # stands in for the real work on each row


@contextmanager
def events_database() -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(EVENTS_DATABASE, timeout=30)) as conn, conn:
        yield conn


def create_events(rows: int) -> None:
    """The table to backfill: `amount_cents` is empty and must be computed."""
    with events_database() as conn:
        conn.execute("DROP TABLE IF EXISTS events")
        conn.execute(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, amount TEXT, amount_cents INTEGER)"
        )
        conn.executemany(
            "INSERT INTO events (id, amount) VALUES (?, ?)",
            ((n, f"{n % 997}.{n % 100:02d}") for n in range(1, rows + 1)),
        )


@app.task(queue="backfill")
def plan_backfill(ctx: due.Context, chunk: int = 10_000) -> None:
    with events_database() as conn:
        (last,) = conn.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()
    ranges = [(start, min(start + chunk, last + 1)) for start in range(1, last + 1, chunk)]
    # Spawning again on a retry adds nothing twice: pieces are numbered.
    ctx.spawn(backfill_range, ranges, on_complete=backfill_finished)


# A short lease: a dead worker's piece is taken over within seconds, and the
# progress (sent with each heartbeat, every lease / 3) moves every two seconds.
@app.task(queue="backfill", lease="6s", stuck_after="1m")
def backfill_range(ctx: due.Context, start: int, stop: int) -> int:
    """Fill `amount_cents` for ids in [start, stop), resuming from the checkpoint."""
    cursor = ctx.checkpoint_value or start
    while cursor < stop:
        upto = min(cursor + CHECKPOINT_EVERY, stop)
        with events_database() as conn:
            conn.execute(
                "UPDATE events SET amount_cents = CAST(round(CAST(amount AS REAL) * 100) "
                "AS INTEGER) WHERE id >= ? AND id < ?",
                (cursor, upto),
            )
        time.sleep(ROW_COST_SECONDS * (upto - cursor))
        cursor = upto
        ctx.checkpoint(cursor)  # durable: a retry starts here (and a cancel stops here)
        ctx.progress(cursor - start, stop - start)
    return stop - start


@app.task(queue="backfill")
def backfill_finished(summary: dict[str, int]) -> str:
    with events_database() as conn:
        (missing,) = conn.execute(
            "SELECT count(*) FROM events WHERE amount_cents IS NULL"
        ).fetchone()
    return (
        f"{summary['succeeded']} of {summary['pieces']} ranges backfilled, "
        f"{summary['failed']} failed, {missing} rows left empty"
    )
