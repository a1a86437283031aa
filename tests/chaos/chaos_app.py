"""The chaos suite's workload: every kind of job due runs, each leaving a witness.

Every execution is written twice:

- to an append-only file (`DUE_CHAOS_LEDGER`, one `os.write` per line, O_APPEND):
  every attempt, whatever becomes of it — a killed attempt's last line is the
  last thing it did;
- to the `chaos_ledger` table, inside the job's own transaction
  (`ctx.transaction()`): only the attempt whose success committed, so the
  database itself says how often each job succeeded.

File lines: `kind job attempt token pid time run_at [detail...]`. Kinds: `start`
(for a job counted against limits, with each as `limit:NAME:KEY`, KEY empty
for the whole limit), `step` (a unit of work done after a safe point, timed at
that safe point), `commit` (written inside the job's own transaction, just
before it commits: its success, when it commits, is later), `end` (with how
it ended), `upstream` (a workflow step's upstream steps as its handler reads
them, `name=state`), `complete` (a parent's completion job, with the parent),
`stamp` (a schedule's run, with the schedule and the time it ran for), `exit`
(a handler about to raise SystemExit or KeyboardInterrupt, with which).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import due

app = due.App()  # DUE_DATABASE_URL
LEDGER = os.environ.get("DUE_CHAOS_LEDGER", "/dev/null")
FAIL_RATE = float(os.environ.get("DUE_CHAOS_FAIL_RATE", "0.1"))
FIXES = os.environ.get("DUE_CHAOS_FIXES", "/dev/null")


FAKED = "faketime" in os.environ.get("LD_PRELOAD", "")
"""This process's wall clock is libfaketime's: an hour ahead, or stepped while it runs."""


def true_time() -> float:
    """This host's true time, however far this process's wall clock is off: the
    kernel stamps a new file with the true time, and the offset (whole hours) is
    read again for each line, so a step while the worker runs is taken back too."""
    now = time.time()
    if not FAKED:
        return now
    with tempfile.NamedTemporaryFile() as probe:
        return now - round(now - os.fstat(probe.fileno()).st_mtime)


STEP_SECONDS = 0.05
RETRY = due.Retry(max_attempts=25, backoff="100ms", max_delay="1s")


def note(kind: str, ctx: due.Context, *detail: object, at: float | None = None) -> None:
    run_at = ctx.run_at.timestamp() if ctx.run_at else 0.0
    now = true_time() if at is None else at
    fields = [kind, ctx.job_id, ctx.attempt, ctx.lease_token, os.getpid(), f"{now:.6f}"]
    line = " ".join(map(str, [*fields, f"{run_at:.6f}", *detail])) + "\n"
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def commit(ctx: due.Context, detail: str = "") -> None:
    """The job's success and its row in chaos_ledger, in one transaction."""
    with ctx.transaction() as conn:
        marker = "?" if app.url.startswith("sqlite") else "%s"
        conn.execute(
            f"INSERT INTO chaos_ledger (job_id, token, pid, detail) "
            f"VALUES ({marker}, {marker}, {marker}, {marker})",
            (ctx.job_id, ctx.lease_token, os.getpid(), detail),
        )
        note("commit", ctx)  # the commit is later: a lower bound of the success


def maybe_fail(ctx: due.Context) -> None:
    if random.random() < FAIL_RATE:
        raise RuntimeError(f"chaos: attempt {ctx.attempt} of job {ctx.job_id} fails on purpose")


def attempt(ctx: due.Context, work: Any, detail: str = "", limits: tuple[str, ...] = ()) -> None:
    """start, the work, the commit, then `end ok` (or `end` with what stopped it)."""
    note("start", ctx, *limits)
    outcome = "error"
    try:
        work()
        commit(ctx, detail)
        outcome = "ok"
    except due.LeaseLost:
        outcome = "lease_lost"
        raise
    finally:
        note("end", ctx, outcome)


def pause(seconds: float) -> None:
    """time.sleep, except under libfaketime, whose clock_nanosleep fails (EINVAL)."""
    threading.Event().wait(seconds)


def steps(ctx: due.Context, count: int, first: int = 0, checkpoint: bool = False) -> None:
    for step in range(first, count):
        # A step is written with the time of the safe point that let it go on
        # (taken just before it): a process paused between the safe point and
        # the work does that work late, which no safe point can prevent (a
        # handler stops at its *next* safe point: docs/explanation/guarantees.md).
        allowed_at = true_time()
        ctx.progress(step, count)  # a safe point: a lost lease stops the work here
        note("step", ctx, step, at=allowed_at)
        pause(STEP_SECONDS)
        if checkpoint:
            ctx.checkpoint(step + 1)


@app.task(name="chaos.quick", retry=RETRY)
def quick(ctx: due.Context, n: int) -> None:
    attempt(ctx, lambda: maybe_fail(ctx))


@app.task(name="chaos.async_quick", retry=RETRY)
async def async_quick(ctx: due.Context, n: int) -> None:
    note("start", ctx)
    outcome = "error"
    try:
        await asyncio.sleep(0.01)
        maybe_fail(ctx)
        outcome = "ok"
    finally:
        note("end", ctx, outcome)


@app.task(name="chaos.slow", retry=RETRY)
def slow(ctx: due.Context, n: int, count: int) -> None:
    def work() -> None:
        steps(ctx, count)
        maybe_fail(ctx)

    attempt(ctx, work)


@app.task(name="chaos.long_sync", retry=RETRY)
def long_sync(ctx: due.Context, n: int, count: int) -> None:
    """Outlasts the workers' grace (2 s): a SIGTERM stops it at a safe point,
    and no other attempt may begin before its last step."""
    attempt(ctx, lambda: steps(ctx, count))


def exit_first(ctx: due.Context, how: str) -> None:
    """Raise SystemExit or KeyboardInterrupt on the first attempt (an `exit` line
    first): that attempt fails, the worker goes on (invariant 17)."""
    if ctx.attempt == 1:
        note("exit", ctx, how)
        if how == "SystemExit":
            raise SystemExit(f"chaos: job {ctx.job_id} exits")
        raise KeyboardInterrupt


@app.task(name="chaos.exits", retry=RETRY)
def exits(ctx: due.Context, n: int, how: str) -> None:
    attempt(ctx, lambda: exit_first(ctx, how))


@app.task(name="chaos.async_exits", retry=RETRY)
async def async_exits(ctx: due.Context, n: int, how: str) -> None:
    note("start", ctx)
    outcome = "error"
    try:
        await asyncio.sleep(0.01)
        exit_first(ctx, how)
        outcome = "ok"
    finally:
        note("end", ctx, outcome)


EXITS = ("SystemExit", "KeyboardInterrupt")


HOSTILE_VALUES: dict[str, Any] = {
    "surrogate": b"caf\xe9".decode("utf-8", "surrogateescape"),
    "nul": "a\x00b",
    "nan": float("nan"),
    "deep": None,  # built on demand: 5,000 lists deep
}


def _hostile(kind: str) -> Any:
    if kind != "deep":
        return HOSTILE_VALUES[kind]
    value: list[Any] = []
    for _ in range(5000):
        value = [value]
    return value


@app.task(name="chaos.hostile", retry=RETRY)
def hostile(ctx: due.Context, n: int, kind: str) -> Any:
    """Values no store can hold, in its progress and its result: each must end
    this job alone (its result kept as a note, its progress refused), never the
    acknowledgements or claims of the others."""
    note("start", ctx)
    value = _hostile(kind)
    with contextlib.suppress(due.PayloadError):  # refused where produced: a NaN
        if isinstance(value, str):
            ctx.progress(1, 2, value)
        else:
            ctx.progress(value if kind == "nan" else 1, 2)
    note("end", ctx, "ok")
    return value


@app.task(name="chaos.checkpointed", retry=RETRY, lease="2s")
def checkpointed(ctx: due.Context, n: int, count: int) -> None:
    first = int(ctx.checkpoint_value or 0)
    attempt(ctx, lambda: steps(ctx, count, first, checkpoint=True), f"resumed {first}")


@app.task(name="chaos.piece", queue="pieces", retry=RETRY)
def piece(ctx: due.Context, n: int) -> None:
    attempt(ctx, lambda: maybe_fail(ctx))


@app.task(name="chaos.pieces_done", queue="pieces", retry=RETRY)
def pieces_done(ctx: due.Context, summary: dict[str, int]) -> None:
    note("complete", ctx, summary["parent"])
    commit(ctx, f"complete {summary['parent']}")


@app.task(name="chaos.stamp", retry=RETRY)
def stamp(ctx: due.Context) -> None:
    assert ctx.scheduled_for is not None
    detail = f"stamp {ctx.scheduled_for.timestamp():.3f}"
    note("stamp", ctx, f"{ctx.scheduled_for.timestamp():.3f}")
    commit(ctx, detail)


@app.task(name="chaos.burst", queue="burst")
async def burst(n: int) -> None:
    """One of a burst of jobs enqueued at once (`run.py --burst`): no ledger line;
    the verdict counts them from the database."""


LIMITS: dict[str, dict[str, Any]] = {
    "chaos-pool": {"concurrency": 2},
    "chaos-account": {"concurrency": 1},
    "chaos-rate": {"rate": "5/s"},
}
"""Declared by the workers' app and by the load's (which computes the keys)."""
ACCOUNTS = ("a", "b", "c")
for _name, _numbers in LIMITS.items():
    app.limit(_name, **_numbers)


def limit_tokens(*pairs: tuple[str, str]) -> tuple[str, ...]:
    """How a start line names the limits its job counts against."""
    return tuple(f"limit:{name}:{key}" for name, key in pairs)


@app.task(
    name="chaos.limited",
    retry=RETRY,
    limits={"chaos-pool": None, "chaos-account": lambda n, account, count: account},
)
def limited(ctx: due.Context, n: int, account: str, count: int) -> None:
    """At most 2 at once, and 1 per account: its steps say how long it ran."""

    def work() -> None:
        steps(ctx, count)
        maybe_fail(ctx)

    attempt(ctx, work, limits=limit_tokens(("chaos-pool", ""), ("chaos-account", account)))


@app.task(name="chaos.rated", retry=RETRY, limits=["chaos-rate"])
def rated(ctx: due.Context, n: int) -> None:
    """At most 5 starts in any second (enqueued in bursts of more)."""
    attempt(ctx, lambda: maybe_fail(ctx), limits=limit_tokens(("chaos-rate", "")))


@app.task(name="chaos.step", retry=RETRY)
def step(ctx: due.Context, n: int, count: int) -> None:
    """A workflow's step: it writes what its handler reads of its upstream steps."""

    def work() -> None:
        seen = ctx.upstream_states
        note("upstream", ctx, *(f"{name}={state.value}" for name, state in sorted(seen.items())))
        steps(ctx, count)
        maybe_fail(ctx)

    attempt(ctx, work)


def fixed(n: int) -> bool:
    """Whether the workflow of load item `n` was fixed (flow_load.py, before a retry)."""
    try:
        return str(n) in Path(FIXES).read_text().split()
    except OSError:
        return False


@app.task(name="chaos.doomed", retry=due.Retry(max_attempts=2, backoff="100ms"))
def doomed(ctx: due.Context, n: int) -> None:
    """A workflow's step that fails for good, until its workflow is fixed: the
    steps after it follow their policy."""

    def work() -> None:
        if not fixed(n):
            raise RuntimeError(f"chaos: step {ctx.job_id} of load item {n} fails for good")

    attempt(ctx, work)


SCHEDULES = {
    "every-allow": {"overlap": "allow"},
    "every-forbid": {"overlap": "forbid"},
    "every-queue": {"overlap": "queue", "misfire": "catch_up", "catch_up_limit": 5},
    "every-replace": {"overlap": "replace"},
}
for _name, _policy in SCHEDULES.items():
    app.schedule(_name, every="1s", task=stamp, misfire_grace="30s", **_policy)  # type: ignore[arg-type]
