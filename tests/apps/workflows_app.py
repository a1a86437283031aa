"""The app that the workflows' process tests run in real worker processes.

Every handler appends to the ledger (one write per line, O_APPEND) when it
starts and when it ends: kind, job, attempt, pid, time, step name. Each
returns a value computed from its input and what `ctx.upstream` gave it
(`value_of`), and a token of its run, also in its ledger lines: from the
stored results a test recomputes what each step's upstream must have been,
and tells the run that succeeded from those whose lease was lost (a job may
run twice under the same attempt number, even in the same process: an attempt
counts only once its start is told to the store).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from typing import Any

import due

app = due.App()  # DUE_DATABASE_URL
LEDGER = os.environ.get("DUE_TEST_LEDGER", "/dev/null")


def record(kind: str, ctx: due.Context, step: str, run: str) -> None:
    """One ledger line: kind, job, attempt, pid, time, step name, run."""
    fields = [kind, ctx.job_id, ctx.attempt, os.getpid(), f"{time.time():.6f}", step, run]
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(map(str, fields)) + "\n").encode())
    finally:
        os.close(fd)


def value_of(step: str, seed: int, upstream: dict[str, Any]) -> str:
    """What a step returns as its value: a digest of its name, its seed and its
    upstream steps' results by name (a wrong, missing or extra one changes it)."""
    text = json.dumps([step, seed, upstream], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@app.task(name="node", lease="2s")
def node(ctx: due.Context, step: str, seed: int, ms: int = 0) -> dict[str, Any]:
    run = uuid.uuid4().hex[:12]
    record("start", ctx, step, run)
    upstream = ctx.upstream
    time.sleep(ms / 1000)
    record("end", ctx, step, run)
    return {"value": value_of(step, seed, upstream), "run": run}


@app.task(name="broken", lease="2s", retry=due.Retry(max_attempts=1))
def broken(ctx: due.Context, step: str) -> None:
    run = uuid.uuid4().hex[:12]
    record("start", ctx, step, run)
    record("end", ctx, step, run)
    raise RuntimeError(f"step {step} breaks")


@app.task(name="observe", lease="2s")
def observe(ctx: due.Context, step: str) -> dict[str, Any]:
    """A step that runs anyway: what happened upstream, as it saw it."""
    run = uuid.uuid4().hex[:12]
    record("start", ctx, step, run)
    seen = {
        "states": {name: state.value for name, state in ctx.upstream_states.items()},
        "upstream": ctx.upstream,
        "run": run,
    }
    record("end", ctx, step, run)
    return seen
