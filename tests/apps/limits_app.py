"""The app that the limits' process tests run in real worker processes.

Every handler appends to the ledger (one write per line, O_APPEND) when it
starts and when it ends, with the limit key it counts against: from those
lines a test computes how many ran at once, per key, in fact (not as the
database says). Each test uses its own limit, so every worker writes the
same numbers at start and a test changes only its own.
"""

from __future__ import annotations

import os
import time

import due

app = due.App()  # DUE_DATABASE_URL
LEDGER = os.environ.get("DUE_TEST_LEDGER", "/dev/null")

app.limit("account", concurrency=1)  # per key: one sync of an account at a time
app.limit("pool", concurrency=2)  # the whole limit: two syncs at a time, any accounts
app.limit("api", rate="20/s")
app.limit("fragile", concurrency=1)  # per key, under faults
app.limit("serial", concurrency=1)  # the backlog of the head-of-line test
app.limit("elastic", concurrency=1)  # raised at run time
app.limit("exports", concurrency=1)  # a schedule's runs, stored before its task had it
app.limit("rated", rate="5/s")  # as the handlers see it (tests/process/test_limit_faults.py)


def record(kind: str, ctx: due.Context, key: str) -> None:
    """One ledger line: kind, job, attempt, pid, time, key."""
    fields = [kind, ctx.job_id, ctx.attempt, os.getpid(), f"{time.time():.6f}", key]
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(map(str, fields)) + "\n").encode())
    finally:
        os.close(fd)


def timed(ctx: due.Context, key: str, seconds: float) -> int:
    record("start", ctx, key)
    time.sleep(seconds)
    record("end", ctx, key)
    return os.getpid()


def by_account(account: str, seconds: float = 0.0) -> str:
    return account


@app.task(name="sync_account", limits={"account": by_account, "pool": None})
def sync_account(ctx: due.Context, account: str, seconds: float = 0.0) -> int:
    return timed(ctx, account, seconds)


@app.task(name="call_api", limits=["api"])
def call_api(ctx: due.Context) -> int:
    return timed(ctx, "api", 0.0)


@app.task(name="fragile_sync", lease="2s", limits={"fragile": by_account})
def fragile_sync(ctx: due.Context, account: str, seconds: float = 0.0) -> int:
    return timed(ctx, account, seconds)


@app.task(name="serial_export", queue="hol", priority=10, limits=["serial"])
def serial_export(ctx: due.Context, seconds: float = 0.0) -> int:
    return timed(ctx, "serial", seconds)


@app.task(name="quick", queue="hol")
def quick(ctx: due.Context) -> int:
    return timed(ctx, "-", 0.0)


@app.task(name="elastic_work", limits=["elastic"])
def elastic_work(ctx: due.Context, seconds: float = 0.0) -> int:
    return timed(ctx, "elastic", seconds)


@app.task(name="call_rated", limits=["rated"])
def call_rated(ctx: due.Context) -> int:
    return timed(ctx, "rated", 0.0)


@app.task(name="scheduled_export", limits=["exports"])
def scheduled_export(ctx: due.Context, seconds: float = 0.0) -> int:
    return timed(ctx, "exports", seconds)
