"""Workflows run by the worker, in-process on real stores: results pass along by
step name, chains and groups, a policy that runs a step anyway."""

from __future__ import annotations

import pytest

import due
from due import JobState
from due.testing import drain


def test_results_pass_along_a_chain_and_into_a_group_s_last_step(app: due.App) -> None:
    seen: dict[str, object] = {}

    @app.task(name="double")
    def double(ctx: due.Context, n: int = 0) -> int:
        before = list(ctx.upstream.values())
        return 2 * (before[0] if before else n)

    @app.task(name="total")
    def total(ctx: due.Context) -> int:
        seen.update(ctx.upstream)
        return sum(ctx.upstream.values())

    chain = app.chain(double.request(1), double.request(), double.request())
    drain(app)
    status = app.workflow_status(chain.id)
    assert status.state == "succeeded"
    assert [app.get(status.steps[f"step-{n}"].job_id).result for n in (1, 2, 3)] == [2, 4, 8]

    group = app.group([double.request(n) for n in (1, 2, 3)], then=total.request())
    drain(app)
    assert app.workflow_status(group.id).state == "succeeded"
    assert seen == {"step-1": 2, "step-2": 4, "step-3": 6}
    assert app.get(group.job_ids["then"]).result == 12


def test_a_step_that_runs_anyway_sees_what_happened_upstream(app: due.App) -> None:
    states: dict[str, JobState] = {}

    @app.task(name="flaky", retry=due.Retry(max_attempts=1))
    def flaky() -> None:
        raise RuntimeError("the rates service is down")

    @app.task(name="audit")
    def audit(ctx: due.Context) -> str:
        states.update(ctx.upstream_states)
        return "audited"

    @app.task(name="mail")
    def mail() -> None: ...

    flow = app.workflow("month-end")
    rates = flow.add(flaky.request(), name="rates")
    flow.add(mail.request(), name="mails", after=[rates])
    flow.add(audit.request(), name="audit", after=[rates], on_upstream_failure="run")
    handle = flow.enqueue()
    drain(app)
    status = app.wait_workflow(handle.id, timeout="10s")
    assert status.state == "failed"
    assert {name: step.state for name, step in status.steps.items()} == {
        "rates": JobState.FAILED,
        "mails": JobState.CANCELLED,
        "audit": JobState.SUCCEEDED,
    }
    assert states == {"rates": JobState.FAILED}


def test_a_step_adds_steps_at_run_time_after_steps_that_exist(app: due.App) -> None:
    @app.task(name="list_files")
    def list_files(ctx: due.Context) -> list[str]:
        files = ["a.csv", "b.csv", "c.csv"]
        for name in files:
            ctx.workflow.add(load.request(name), name=f"load {name}", after=["list"])
        # the report waits for every load: added after them, by name
        ctx.workflow.add(report.request(), name="report", after=[f"load {n}" for n in files])
        return files

    @app.task(name="load")
    def load(ctx: due.Context, name: str) -> int:
        return len(ctx.upstream["list"])

    @app.task(name="report")
    def report(ctx: due.Context) -> int:
        return sum(ctx.upstream.values())

    flow = app.workflow("import")
    flow.add(list_files.request(), name="list")
    handle = flow.enqueue()
    drain(app)
    status = app.workflow_status(handle.id)
    assert status.state == "succeeded"
    assert sorted(status.steps) == ["list", "load a.csv", "load b.csv", "load c.csv", "report"]
    assert status.steps["report"].after == ("load a.csv", "load b.csv", "load c.csv")
    assert app.get(status.steps["report"].job_id).result == 9
    assert status.steps_total == 5


def test_a_step_added_after_a_failed_one_is_cancelled_at_once(app: due.App) -> None:
    @app.task(name="broken", retry=due.Retry(max_attempts=1))
    def broken() -> None:
        raise RuntimeError("no")

    @app.task(name="late")
    def late(ctx: due.Context) -> None:
        ctx.workflow.add(tail.request(), name="tail", after=["broken"])
        ctx.workflow.add(tail.request(), name="anyway", after=["broken"], on_upstream_failure="run")

    @app.task(name="tail")
    def tail() -> str:
        return "ran"

    flow = app.workflow("late adds")
    first = flow.add(broken.request(), name="broken")
    flow.add(late.request(), name="late", after=[first], on_upstream_failure="run")
    handle = flow.enqueue()
    drain(app)
    states = {name: step.state for name, step in app.workflow_status(handle.id).steps.items()}
    assert states == {
        "broken": JobState.FAILED,
        "late": JobState.SUCCEEDED,
        "tail": JobState.CANCELLED,
        "anyway": JobState.SUCCEEDED,
    }
    assert app.workflow_status(handle.id).state == "failed"


def test_a_step_that_spawns_pieces_ends_when_they_end_and_only_then_releases(
    app: due.App,
) -> None:
    order: list[str] = []

    @app.task(name="split")
    def split(ctx: due.Context) -> None:
        ctx.spawn(piece, [(n,) for n in range(3)])

    @app.task(name="piece")
    def piece(n: int) -> None:
        order.append(f"piece {n}")

    @app.task(name="after")
    def after(ctx: due.Context) -> str:
        order.append("after")
        return str(ctx.upstream_states["split"].value)

    flow = app.workflow("pieces")
    first = flow.add(split.request(), name="split")
    last = flow.add(after.request(), name="after", after=[first])
    handle = flow.enqueue()
    drain(app)
    assert app.workflow_status(handle.id).state == "succeeded"
    assert order[-1] == "after" and sorted(order[:-1]) == ["piece 0", "piece 1", "piece 2"]
    assert app.get(last.job_id).result == "succeeded"


def test_a_workflow_holds_at_most_its_maximum_of_steps(app: due.App) -> None:
    from due.workflows import MAX_STEPS

    @app.task(name="noop")
    def noop() -> None: ...

    flow = app.workflow("huge")
    for _ in range(MAX_STEPS):
        flow.add(noop.request())
    with pytest.raises(
        due.ConfigurationError, match=f"at most {MAX_STEPS:,} steps|at most {MAX_STEPS} steps"
    ):
        flow.add(noop.request())
    assert app.jobs(limit=1) == []  # nothing written before enqueue


def test_a_step_that_fails_and_is_retried_holds_the_steps_after_it_until_its_last_attempt(
    app: due.App,
) -> None:
    from datetime import timedelta

    from due.clock import FakeClock

    tries: list[int] = []

    @app.task(name="flaky", retry=due.Retry(max_attempts=2, backoff=60))
    def flaky(ctx: due.Context) -> int:
        tries.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("the first try fails")
        return 7

    @app.task(name="next")
    def after(ctx: due.Context) -> int:
        return ctx.upstream["flaky"] + 1

    flow = app.workflow("retried")
    first = flow.add(flaky.request(), name="flaky")
    last = flow.add(after.request(), name="next", after=[first])
    handle = flow.enqueue()
    drain(app)
    assert tries == [1] and app.get(last.job_id).state == JobState.WAITING
    clock = app.clock
    assert isinstance(clock, FakeClock)
    clock.advance(timedelta(minutes=5))
    drain(app)
    assert tries == [1, 2]
    assert app.get(last.job_id).result == 8
    assert app.workflow_status(handle.id).state == "succeeded"
