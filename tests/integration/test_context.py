"""The handler's context on real stores (run through due.testing.drain): checkpoints
that a retry resumes from, pieces spawned once, completion tasks, the job's own
transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.records import ClaimRequest
from due.testing import drain
from tests.helpers.database import plain_transaction, rows


class Flaky(Exception):
    pass


def test_a_retry_resumes_from_the_last_checkpoint(app: due.App, clock: FakeClock) -> None:
    written: list[int] = []
    starts: list[Any] = []

    @app.task(name="copy", retry=due.Retry(max_attempts=3, backoff="1s", jitter=0))
    def copy(ctx: due.Context, rows: int) -> int:
        cursor = ctx.checkpoint_value or 0
        starts.append(cursor)
        for row in range(cursor, rows):
            if row == 7 and ctx.attempt == 1:
                raise Flaky("the connection dropped")
            written.append(row)
            ctx.checkpoint(row + 1)
            ctx.progress(row + 1, rows)
        return len(written)

    job = copy.enqueue(10)
    assert drain(app).retried == [job.id]
    assert app.get(job.id).checkpoint == 7
    clock.advance("2s")
    assert drain(app).succeeded == [job.id]
    assert starts == [0, 7]
    assert written == list(range(10))  # each row once
    done = app.get(job.id)
    assert done.progress == {"done": 10, "total": 10}


def test_async_handlers_await_checkpoints_and_spawn(app: due.App) -> None:
    @app.task(name="chunk")
    async def chunk(start: int, stop: int) -> int:
        await asyncio.sleep(0)
        return stop - start

    @app.task(name="summarise")
    def summarise(summary: dict) -> dict:
        return summary

    @app.task(name="plan")
    async def plan(ctx: due.Context, total: int) -> None:
        await ctx.checkpoint("planning")
        ranges = [(start, min(start + 10, total)) for start in range(0, total, 10)]
        assert await ctx.spawn(chunk, ranges, on_complete=summarise) == 5

    parent = plan.enqueue(50)
    result = drain(app)
    assert result.waiting == [parent.id] and len(result.succeeded) == 6
    done = app.get(parent.id)
    assert done.state == JobState.SUCCEEDED and done.checkpoint == "planning"
    (completion,) = app.jobs(task="summarise")
    assert completion.result == {"parent": parent.id, "pieces": 5, "succeeded": 5, "failed": 0}
    assert done.result == {"completion": completion.id}


def test_a_parent_that_fails_after_spawning_adds_no_piece_twice(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="leaf")
    def leaf(n: int) -> None: ...

    @app.task(name="tree", retry=due.Retry(max_attempts=2, backoff="1s", jitter=0))
    def tree(ctx: due.Context) -> None:
        ctx.spawn("leaf", [(n,) for n in range(3)])
        if ctx.attempt == 1:
            raise Flaky("crashed after spawning")
        ctx.spawn("leaf", [(n,) for n in range(3, 5)])

    parent = tree.enqueue()
    drain(app)
    clock.advance("2s")
    drain(app)
    done = app.get(parent.id)
    assert done.state == JobState.SUCCEEDED
    assert done.pieces == due.Pieces(total=5, succeeded=5, failed=0)
    assert sorted(j.args for j in app.jobs(parent=parent.id)) == [(n,) for n in range(5)]


def test_a_failing_piece_under_fail_policy_ends_the_batch(app: due.App) -> None:
    ran: list[int] = []

    @app.task(name="fragile", retry=due.Retry(max_attempts=1))
    def fragile(n: int) -> None:
        ran.append(n)
        if n == 0:
            raise Flaky("bad row")

    parent = app.batch(fragile, [(n,) for n in range(4)], on_piece_failure="fail")
    drain(app)
    assert ran == [0]  # claimed in order: the first piece fails, the rest are cancelled
    assert app.get(parent.id).state == JobState.FAILED


def test_a_jobs_transaction_writes_once_with_its_success(app: due.App) -> None:
    @app.task(name="post")
    def post(ctx: due.Context, amount: int) -> None:
        with ctx.transaction() as conn:
            conn.execute(f"INSERT INTO ledger VALUES ({ctx.job_id}, {int(amount)})")

    with plain_transaction(app.url) as conn:
        conn.execute("CREATE TABLE ledger (job integer, amount integer)")
    job = post.enqueue(30)
    assert drain(app).succeeded == [job.id]
    assert app.get(job.id).state == JobState.SUCCEEDED
    assert rows(app.url, "SELECT job, amount FROM ledger") == [(job.id, 30)]


def test_spawn_refuses_bad_pieces_and_policies(app: due.App) -> None:
    errors: list[Exception] = []

    @app.task(name="leaf")
    def leaf(n: int) -> None: ...

    @app.task(name="tree")
    def tree(ctx: due.Context) -> None:
        for attempt in (
            lambda: ctx.spawn("leaf", [(1, 2)]),
            lambda: ctx.spawn("leaf", [(1,)], on_piece_failure="maybe"),
            lambda: ctx.spawn("leaf", [5]),
            lambda: ctx.spawn("nope", [(1,)]),
        ):
            try:
                attempt()
            except due.DueError as error:
                errors.append(error)

    tree.enqueue()
    drain(app)
    assert [type(e).__name__ for e in errors] == [
        "ArgumentsError",
        "ConfigurationError",
        "ConfigurationError",
        "UnknownTaskError",
    ]
    assert "on_piece_failure='maybe'" in str(errors[1])
    assert app.jobs(task="leaf") == []


def test_a_checkpoint_on_your_connection_commits_with_your_rows(
    app: due.App, clock: FakeClock
) -> None:
    with plain_transaction(app.url) as conn:
        conn.execute("CREATE TABLE copied (n integer)")

    @app.task(name="copy", retry=due.Retry(max_attempts=2, backoff="1s", jitter=0))
    def copy(ctx: due.Context) -> None:
        start = ctx.checkpoint_value or 0
        for first in range(start, 30, 10):
            with plain_transaction(app.url) as conn:
                for n in range(first, first + 10):
                    conn.execute(f"INSERT INTO copied VALUES ({n})")
                if first == 20 and ctx.attempt == 1:
                    raise Flaky("crashed mid-batch")  # rows and cursor roll back together
                ctx.checkpoint(first + 10, connection=conn)

    job = copy.enqueue()
    drain(app)
    assert app.get(job.id).checkpoint == 20
    clock.advance("2s")
    assert drain(app).succeeded == [job.id]
    assert rows(app.url, "SELECT n FROM copied ORDER BY n") == [(n,) for n in range(30)]


def test_a_stale_checkpoint_on_your_connection_raises_lease_lost(
    app: due.App, clock: FakeClock
) -> None:
    outcomes: list[str] = []

    @app.task(name="slow")
    def slow(ctx: due.Context) -> None:
        with pytest.raises(due.ConfigurationError, match="takes a"):
            ctx.checkpoint(1, connection="not a connection")
        outcomes.append("refused")
        ctx.lease_token -= 1  # (as if another attempt had taken the job over)
        try:
            with plain_transaction(app.url) as conn:
                ctx.checkpoint(1, connection=conn)
        except due.LeaseLost:
            outcomes.append("lease lost")
            raise

    slow.enqueue()
    drain(app)
    assert outcomes == ["refused", "lease lost"]


def test_async_handlers_checkpoint_on_their_own_async_connection(app: due.App) -> None:
    @app.task(name="acopy")
    async def acopy(ctx: due.Context) -> None:
        if app.url.startswith("sqlite"):
            with plain_transaction(app.url) as conn:
                await ctx.checkpoint("done", connection=conn)
            return
        async with (
            await psycopg.AsyncConnection.connect(app.url) as aconn,
            aconn.transaction(),
        ):
            await ctx.checkpoint("done", connection=aconn)

    job = acopy.enqueue()
    assert drain(app).succeeded == [job.id]
    assert app.get(job.id).checkpoint == "done"


def test_nested_pieces_report_up_to_the_top(app: due.App) -> None:
    @app.task(name="leaf")
    def leaf(n: int) -> int:
        return n

    @app.task(name="branch")
    def branch(ctx: due.Context, n: int) -> None:
        ctx.spawn(leaf, [(n * 10 + k,) for k in range(2)])

    @app.task(name="root")
    def root(ctx: due.Context) -> None:
        ctx.spawn(branch, [(1,), (2,)])

    top = root.enqueue()
    drain(app)
    done = app.get(top.id)
    assert done.state == JobState.SUCCEEDED
    assert done.pieces == due.Pieces(total=2, succeeded=2, failed=0)
    assert len(app.jobs(task="leaf", state="succeeded")) == 4


def test_a_resumed_parent_spawns_the_rest_and_waits_for_all(app: due.App, clock: FakeClock) -> None:
    ran: list[int] = []

    @app.task(name="part")
    def part(n: int) -> None:
        ran.append(n)

    @app.task(name="planner", retry=due.Retry(max_attempts=2, backoff="1s", jitter=0))
    def planner(ctx: due.Context) -> None:
        if ctx.checkpoint_value is None:
            ctx.spawn(part, [(1,), (2,)])
            ctx.checkpoint("first half spawned")
            raise Flaky("died half way")
        ctx.spawn(part, [(3,), (4,)])

    parent = planner.enqueue()
    drain(app)
    clock.advance("2s")
    drain(app)
    assert sorted(ran) == [1, 2, 3, 4]
    assert app.get(parent.id).pieces == due.Pieces(total=4, succeeded=4, failed=0)
    assert app.get(parent.id).state == JobState.SUCCEEDED


def test_a_parent_resumed_after_spawning_everything_still_waits(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="slow_part")
    def slow_part(n: int) -> None: ...

    @app.task(name="spawner", retry=due.Retry(max_attempts=2, backoff="1s", jitter=0))
    def spawner(ctx: due.Context) -> None:
        if ctx.checkpoint_value is None:
            ctx.spawn(slow_part, [(1,)])
            ctx.checkpoint("all spawned")
            raise Flaky("died after spawning")
        # resumed: nothing left to spawn

    parent = spawner.enqueue()
    drain(app, queues=["default"], max_attempts=1)  # only the parent's first attempt
    clock.advance("2s")
    (retry,) = app.store.job_claim(ClaimRequest("default", 1, "w", 30, tasks=["spawner"]))
    attempt = asyncio.run(_run(app, retry))
    app.store.job_complete([attempt])
    assert app.get(parent.id).state == JobState.WAITING  # its piece has not run yet
    drain(app)
    assert app.get(parent.id).state == JobState.SUCCEEDED


def test_a_job_that_spawned_cannot_finish_in_its_own_transaction(app: due.App) -> None:
    refusals: list[str] = []

    @app.task(name="leaf")
    def leaf(n: int) -> None: ...

    @app.task(name="mixed")
    def mixed(ctx: due.Context) -> None:
        ctx.spawn(leaf, [(1,)])
        try:
            with ctx.transaction():
                pass
        except due.ConfigurationError as error:
            refusals.append(str(error))

    parent = mixed.enqueue()
    drain(app)
    assert refusals and "on_complete" in refusals[0]
    assert app.get(parent.id).state == JobState.SUCCEEDED  # after its piece


async def _run(app: due.App, job: Any) -> Any:
    from due.worker.executor import Executor

    attempt = await Executor(app.tasks, app.clock, app=app).run(job)
    return attempt.completion
