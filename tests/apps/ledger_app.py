"""The app that process tests run in real worker processes.

Every task appends to a ledger file (one write per line, O_APPEND) what it did,
when, and in which process: the witness that each job ran exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
import time

import due
from tests.helpers.database import plain_transaction

app = due.App()  # DUE_DATABASE_URL
LEDGER = os.environ.get("DUE_TEST_LEDGER", "/dev/null")


def record(kind: str, ctx: due.Context, *extra: object) -> None:
    """One ledger line: kind, job, attempt, pid, time, then any extra fields."""
    fields = [kind, ctx.job_id, ctx.attempt, os.getpid(), f"{time.time():.6f}", *extra]
    line = " ".join(map(str, fields)) + "\n"
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@app.task(name="work")
def work(ctx: due.Context, seconds: float = 0.0) -> int:
    record("start", ctx)
    time.sleep(seconds)
    record("end", ctx)
    return os.getpid()


@app.task(name="async_work")
async def async_work(ctx: due.Context, seconds: float = 0.0) -> int:
    record("start", ctx)
    try:
        await asyncio.sleep(seconds)
    finally:
        record("end", ctx)
    return os.getpid()


@app.task(name="one_shot", retry=due.Retry(max_attempts=1))
def one_shot(ctx: due.Context) -> None:
    """A job with one attempt: spent only by a start that ran."""
    record("start", ctx)


@app.task(name="noop")
async def noop(ctx: due.Context) -> None:
    record("start", ctx)


@app.task(name="garbage_collection")
def garbage_collection() -> dict[str, int]:
    """How the worker process that runs it collects garbage."""
    return {"young_threshold": gc.get_threshold()[0], "frozen": gc.get_freeze_count()}


@app.task(name="bulk_work", queue="bulk")
def bulk_work(ctx: due.Context, seconds: float = 1.0) -> None:
    record("start", ctx)
    time.sleep(seconds)


@app.task(name="email", queue="emails")
def email(ctx: due.Context) -> None:
    record("start", ctx)


@app.task(name="poison")
def poison(ctx: due.Context) -> None:
    record("start", ctx)
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(name="stamp")
def stamp(ctx: due.Context) -> None:
    """A schedule's run: the ledger keeps the time it ran for."""
    assert ctx.scheduled_for is not None
    line = (
        f"tick {ctx.job_id} {ctx.scheduled_for.timestamp():.3f} {os.getpid()} {time.time():.6f}\n"
    )
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


# --- long work ---------------------------------------------------------------------


@app.task(name="copy_rows")
def copy_rows(ctx: due.Context, rows: int, every: int = 10, delay: float = 0.01) -> None:
    """Resumes from its checkpoint; the ledger gets one `row` line per row written."""
    start = ctx.checkpoint_value or 0
    record("resume", ctx, start)
    for row in range(start, rows):
        record("row", ctx, row)
        time.sleep(delay)
        if (row + 1) % every == 0:
            ctx.checkpoint(row + 1)
        ctx.progress(row + 1, rows)


@app.task(name="copy_rows_once")
def copy_rows_once(ctx: due.Context, rows: int, batch: int = 10, delay: float = 0.01) -> None:
    """Each batch of rows commits with the checkpoint that says it is done."""
    start = ctx.checkpoint_value or 0
    record("resume", ctx, start)
    for first in range(start, rows, batch):
        last = min(first + batch, rows)
        with plain_transaction(os.environ["DUE_DATABASE_URL"]) as conn:
            for row in range(first, last):
                conn.execute(f"INSERT INTO copied VALUES ({row}, {ctx.attempt})")
            time.sleep(delay * (last - first))  # a kill often lands here, mid-batch
            ctx.checkpoint(last, connection=conn)
        record("batch", ctx, last)
        ctx.progress(last, rows)
        # A gap between transactions, as the README asks: on SQLite, back-to-back
        # write transactions starve the heartbeat (the lease is lost, the job runs
        # a third time from its checkpoint: safe, but not what this test checks).
        time.sleep(delay * (last - first))


@app.task(name="cancellable")
def cancellable(ctx: due.Context) -> None:
    record("start", ctx)
    try:
        for step in range(1_000_000):
            time.sleep(0.01)
            ctx.progress(step)  # a safe point
    finally:
        record("end", ctx)


@app.task(name="async_cancellable")
async def async_cancellable(ctx: due.Context) -> None:
    record("start", ctx)
    try:
        for step in range(1_000_000):
            await asyncio.sleep(0.01)
            ctx.progress(step)
    finally:
        record("end", ctx)


@app.task(name="piece")
def piece(ctx: due.Context, n: int, seconds: float = 0.02) -> int:
    record("start", ctx, n)
    time.sleep(seconds)
    return n


@app.task(name="bulk_piece", queue="bulk")
def bulk_piece(ctx: due.Context, n: int, seconds: float = 0.05) -> int:
    record("start", ctx, n)
    time.sleep(seconds)
    return n


@app.task(name="pieces_done")
def pieces_done(ctx: due.Context, summary: dict[str, int]) -> None:
    record("complete", ctx, summary["parent"], summary["succeeded"], summary["failed"])


@app.task(name="silent", stuck_after="1s")
def silent(ctx: due.Context, seconds: float, until: str = "") -> None:
    """Makes no progress for `seconds`, or until the file `until` exists (a test
    ends it once it has seen what it looks for, however slow the machine)."""
    record("start", ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until and os.path.exists(until)):
        time.sleep(0.05)


@app.task(name="post_entry")
def post_entry(ctx: due.Context, hold: float) -> None:
    """Writes its entry in the job's own transaction; the first attempt lingers in it
    (once its worker has had time to say it began: on SQLite the open transaction
    holds the one write lock, and a start never said is an attempt not counted)."""
    if ctx.attempt == 1:
        time.sleep(0.5)
    with ctx.transaction() as conn:
        conn.execute(f"INSERT INTO entries VALUES ({ctx.job_id}, {ctx.attempt})")
        record("written", ctx)
        if ctx.attempt == 1:
            time.sleep(hold)


if os.environ.get("DUE_TEST_SCHEDULE"):
    app.schedule("tick", every="1s", task="stamp", overlap="allow")


@app.task(name="ticking")
def ticking(ctx: due.Context, seconds: float) -> int:
    """Works in small steps with a safe point after each; the ledger gets a `step`
    line per step, the witness of when this attempt was still running."""
    record("start", ctx)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            record("step", ctx)
            time.sleep(0.05)
            ctx.progress(1)
    finally:
        record("end", ctx)
    return os.getpid()


LEAKED: list[bytes] = []


@app.task(name="leaky")
def leaky(ctx: due.Context, megabytes: int = 10, seconds: float = 0.2) -> int:
    """Keeps what it allocates, as a leaking library would (the memory is touched,
    so it is resident)."""
    record("start", ctx)
    LEAKED.append(b"\x01" * (megabytes * 1_000_000))
    time.sleep(seconds)
    return os.getpid()


@app.task(name="charge", retry=due.Retry(max_attempts=1))
def charge(ctx: due.Context, n: int) -> None:
    """Fails each time it runs (the bank is still down): a job a bulk retry puts
    back fails again, and the ledger says how many times it ran."""
    record("start", ctx)
    raise TimeoutError("the bank did not answer")


# --- handlers that end in a BaseException (invariant 17) ----------------------------


@app.task(name="exits", retry=due.Retry(max_attempts=1))
def exits(ctx: due.Context, password: str) -> None:
    """Calls sys.exit from a handler thread, its message naming a hidden argument."""
    record("start", ctx)
    sys.exit(f"cannot log in with {password}")


@app.task(name="async_exits", retry=due.Retry(max_attempts=1))
async def async_exits(ctx: due.Context, password: str) -> None:
    """Calls sys.exit on the worker's event loop."""
    record("start", ctx)
    await asyncio.sleep(0)
    sys.exit(f"cannot log in with {password}")


@app.task(name="interrupts", retry=due.Retry(max_attempts=1))
def interrupts(ctx: due.Context) -> None:
    """Raises KeyboardInterrupt itself: no signal reached the worker."""
    record("start", ctx)
    raise KeyboardInterrupt("raised by the task")


@app.task(name="async_interrupts", retry=due.Retry(max_attempts=1))
async def async_interrupts(ctx: due.Context) -> None:
    record("start", ctx)
    await asyncio.sleep(0)
    raise KeyboardInterrupt("raised by the task")


@app.task(name="parses_arguments", retry=due.Retry(max_attempts=1))
def parses_arguments(ctx: due.Context, argv: list[str]) -> None:
    """A command-line parser fed bad input exits with code 2, as argparse does."""
    record("start", ctx)
    parser = argparse.ArgumentParser(prog="report", exit_on_error=True)
    parser.add_argument("--month", required=True)
    parser.parse_args(argv)


@app.task(name="async_cancels_itself", retry=due.Retry(max_attempts=1))
async def async_cancels_itself(ctx: due.Context) -> None:
    """Awaits a future someone else cancelled: a CancelledError the worker did
    not ask for."""
    record("start", ctx)
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    await future
