"""Workflows run by the worker, in-process on real stores: results pass along by
step name, chains and groups, a policy that runs a step anyway."""

from __future__ import annotations

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
