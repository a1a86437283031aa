"""The app that process tests run in real worker processes.

Every task appends to a ledger file (one write per line, O_APPEND) what it did,
when, and in which process: the witness that each job ran exactly once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import due

app = due.App()  # DUE_DATABASE_URL
LEDGER = os.environ.get("DUE_TEST_LEDGER", "/dev/null")


def record(kind: str, ctx: due.Context) -> None:
    line = f"{kind} {ctx.job_id} {ctx.attempt} {os.getpid()} {time.time():.6f}\n"
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


@app.task(name="noop")
async def noop(ctx: due.Context) -> None:
    record("start", ctx)


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


if os.environ.get("DUE_TEST_SCHEDULE"):
    app.schedule("tick", every="1s", task="stamp", overlap="allow")
