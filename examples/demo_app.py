"""A small example app: the tasks `make demo` runs."""

from __future__ import annotations

import asyncio
import os

import due

app = due.App(os.environ.get("DUE_DATABASE_URL", "sqlite:///demo.db"))


@app.task(queue="emails", retry=due.Retry(max_attempts=5, backoff="1s"))
def send_welcome_email(user_id: int) -> str:
    return f"welcome email sent to user {user_id}"


@app.task(queue="emails")
def send_reminder(ctx: due.Context, user_id: int) -> str:
    return f"reminder sent to user {user_id} (job {ctx.job_id})"


@app.task(queue="reports", timeout="30s")
async def build_report(month: str) -> dict[str, object]:
    await asyncio.sleep(0.1)  # stands in for real I/O
    return {"month": month, "rows": 1234}


@app.task(queue="reports")
def tally(ctx: due.Context) -> str:
    assert ctx.scheduled_for is not None
    return f"tally for {ctx.scheduled_for:%H:%M:%S}"


# A cron schedule (with a seconds field); the worker's scheduler runs it.
app.schedule("tally", "*/2 * * * * *", task=tally, overlap="forbid", misfire="latest")


@app.task(queue="reports", retry=due.Retry(max_attempts=3, backoff="500ms", jitter=0))
def flaky_export(ctx: due.Context) -> str:
    if ctx.attempt == 1:
        raise ConnectionError("export service not ready (first attempt fails on purpose)")
    return f"exported on attempt {ctx.attempt}"


# The long chunked job lives in its own module; importing it registers its tasks.
import backfill  # noqa: E402, F401
