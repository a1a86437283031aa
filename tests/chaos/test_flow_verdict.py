"""The chaos verdict's rows for limits and workflows catch what they are for:
hand-made ledgers, each breaking one invariant, must each be found (and a
ledger that breaks none must pass), through `judge`, as a chaos run calls it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from due.core.limits import Limit
from tests.chaos import flow_verdict
from tests.chaos.flow_verdict import (
    EARLY_STEPS,
    LIMIT_EXCEEDED,
    RATE_EXCEEDED,
    STUCK,
    UNEXPLAINED,
    Action,
)
from tests.chaos.verdict import Line, Verdict, judge

LIMITS = {
    "pool": Limit("pool", concurrency=2),
    "account": Limit("account", concurrency=1),
    "rate": Limit("rate", rate=5, period=1.0),
}
LOAD_ENDED = 1000.0


class Run:
    """A chaos run's facts, written by hand: jobs, their handlers' lines, their
    commits, workflows and their edges."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.jobs: dict[int, dict[str, Any]] = {}
        self.successes: list[tuple[int, int, str]] = []
        self.edges: list[tuple[int, int]] = []
        self.workflows: dict[int, dict[str, Any]] = {}
        self.actions: list[Action] = []

    def job(
        self,
        job: int,
        state: str = "succeeded",
        *,
        workflow: int | None = None,
        policy: str | None = None,
        limited: bool = False,
        after: tuple[int, ...] = (),
        error: str | None = None,
        error_kinds: tuple[str, ...] = (),
    ) -> None:
        self.jobs[job] = {
            "state": state,
            "errors": len(error_kinds),
            "error_kinds": list(error_kinds),
            "run_at": 0.0,
            "created_at": 0.0,
            "attempt": 0,
            "task": "chaos.step" if workflow else "chaos.limited",
            "last_error": error,
            "workflow": workflow,
            "policy": policy,
            "limited": limited,
        }
        self.edges += [(up, job) for up in after]

    def attempt(
        self,
        job: int,
        token: int,
        start: float,
        *,
        steps: tuple[float, ...] = (),
        commit: float | None = None,
        committed: bool = True,
        end: tuple[float, str] | None = None,
        limits: tuple[str, ...] = (),
        upstream: tuple[str, ...] | None = None,
    ) -> None:
        """One attempt's lines; the job's attempt count and history follow."""
        record = self.jobs[job]
        record["attempt"] += 1
        if record["attempt"] > 1:
            record["errors"] = max(record["errors"], record["attempt"] - 1)

        def line(kind: str, at: float, *detail: str) -> None:
            self.lines.append(Line(kind, job, record["attempt"], token, 1, at, 0.0, list(detail)))

        line("start", start, *limits)
        if upstream is not None:
            line("upstream", start, *upstream)
        for at in steps:
            line("step", at, str(at))
        if commit is not None:
            line("commit", commit)
            if committed:
                self.successes.append((job, token, ""))
        if end is not None:
            line("end", *end)

    def workflow(self, workflow: int, state: str, created_at: float = 0.0) -> None:
        self.workflows[workflow] = {"state": state, "created_at": created_at, "finished_at": 5.0}

    def judge(self) -> Verdict:
        return judge(
            backend="sqlite",
            seconds=LOAD_ENDED,
            load_ended=LOAD_ENDED,
            enqueued={job: record["run_at"] for job, record in self.jobs.items()},
            jobs=self.jobs,
            successes=self.successes,
            schedule_runs=[],
            ledger=self.lines,
            faults=[],
            leadership=[],
            edges=self.edges,
            workflows=self.workflows,
            limits=LIMITS,
            actions=self.actions,
        )


def found(verdict: Verdict) -> dict[str, int]:
    """The rows found not zero (every row counted, the rate's too)."""
    return {name: count for name, count in verdict.counts.items() if count}


POOL_A = ("limit:pool:", "limit:account:a")
POOL_B = ("limit:pool:", "limit:account:b")
POOL_C = ("limit:pool:", "limit:account:c")


def limited_run() -> Run:
    """Two limited jobs at once (the pool's 2), one per account; a third after both."""
    run = Run()
    for job in (1, 2, 3):
        run.job(job, limited=True)
    run.attempt(1, 11, 0.0, steps=(0.1,), commit=0.2, end=(0.25, "ok"), limits=POOL_A)
    run.attempt(2, 21, 0.05, steps=(0.1,), commit=0.3, end=(0.35, "ok"), limits=POOL_B)
    run.attempt(3, 31, 0.3, steps=(0.4,), commit=0.5, end=(0.55, "ok"), limits=POOL_A)
    return run


def test_limits_held_are_not_found() -> None:
    verdict = limited_run().judge()
    assert found(verdict) == {}, verdict.examples
    assert verdict.ok()
    assert verdict.flows is not None
    assert verdict.flows.limit_peaks == {"account": (1, 1), "pool": (2, 2)}


def test_a_third_handler_at_work_under_a_limit_of_two_is_found() -> None:
    run = limited_run()
    run.job(4, limited=True)
    run.attempt(4, 41, 0.15, steps=(0.2,), commit=0.25, end=(0.3, "ok"), limits=POOL_C)
    verdict = run.judge()
    assert found(verdict) == {LIMIT_EXCEEDED: 1}, verdict.examples
    assert not verdict.ok()


def test_two_handlers_of_one_key_at_once_are_found() -> None:
    run = Run()
    for job in (1, 2):
        run.job(job, limited=True)
    run.attempt(1, 11, 0.0, steps=(0.1, 0.2), commit=0.3, end=(0.35, "ok"), limits=POOL_A)
    run.attempt(2, 21, 0.25, steps=(0.3,), commit=0.4, end=(0.45, "ok"), limits=POOL_A)
    assert found(run.judge()) == {LIMIT_EXCEEDED: 1}


def test_a_frozen_handler_counts_until_its_last_trusted_work() -> None:
    """Frozen past its lease after its step at 0.1, it woke at 5.0 and stopped at
    its next safe point (`end lease_lost`): the slot it held was free from its
    rescue on, and two others took the pool meanwhile. Not an excess; but a
    commit that went through while they ran is."""
    run = Run()
    for job in (1, 2, 3):
        run.job(job, limited=True)
    run.attempt(1, 11, 0.0, steps=(0.1,), end=(5.0, "lease_lost"), limits=POOL_A)
    run.attempt(1, 12, 3.0, steps=(3.1,), commit=3.2, end=(3.3, "ok"), limits=POOL_A)
    run.attempt(2, 21, 3.0, steps=(3.1,), commit=3.2, end=(3.3, "ok"), limits=POOL_B)
    run.attempt(3, 31, 4.0, steps=(4.1,), commit=4.2, committed=False, limits=POOL_C)
    run.attempt(3, 32, 4.5, steps=(4.6,), commit=4.7, end=(4.8, "ok"), limits=POOL_C)
    assert found(run.judge()) == {}, run.judge().examples

    # Had job 3's success committed at 3.05, from an attempt begun at 0.05, it
    # was at work, its lease trusted, when the other two started at 3.0.
    run.successes.remove((3, 32, ""))
    run.attempt(3, 33, 0.05, steps=(0.06,), commit=3.05, limits=POOL_C)
    assert found(run.judge()) == {LIMIT_EXCEEDED: 1}


def test_starts_over_a_rate_are_reported_and_asserted_only_when_switched_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = Run()
    for job in range(1, 8):
        run.job(job, limited=True)
        at = 0.1 * job
        run.attempt(job, job * 10, at, commit=at, end=(at, "ok"), limits=("limit:rate:",))
    verdict = run.judge()
    assert found(verdict) == {RATE_EXCEEDED: 2}  # 6 and 7 in the first second
    assert verdict.flows is not None and verdict.flows.rate_peaks == {"rate": (7, 5)}
    assert flow_verdict.RATE_ASSERTED and not verdict.ok()  # asserted on every run
    monkeypatch.setattr(flow_verdict, "RATE_ASSERTED", False)
    assert verdict.ok()


def chain_run(step_start: float = 1.0) -> Run:
    """Workflow 100: job 10, then 11 after it (default policy) and 12 after it
    (runs anyway)."""
    run = Run()
    run.job(10, workflow=100)
    run.job(11, workflow=100, policy="cancel", after=(10,))
    run.job(12, workflow=100, policy="run", after=(10,))
    run.workflow(100, "succeeded")
    run.attempt(10, 101, 0.0, steps=(0.1,), commit=0.5, end=(0.6, "ok"), upstream=())
    run.attempt(
        11, 111, step_start, commit=step_start + 0.1, end=(2.0, "ok"), upstream=("s=succeeded",)
    )
    run.attempt(
        12, 121, step_start, commit=step_start + 0.1, end=(2.0, "ok"), upstream=("s=succeeded",)
    )
    return run


def test_steps_after_their_upstream_success_are_not_found() -> None:
    verdict = chain_run().judge()
    assert found(verdict) == {}, verdict.examples


def test_a_step_started_before_its_upstream_committed_is_found() -> None:
    verdict = chain_run(step_start=0.4).judge()  # the upstream's commit line is at 0.5
    assert found(verdict) == {EARLY_STEPS: 2}, verdict.examples  # 11, and 12 (it worked then)


def test_a_step_started_though_its_upstream_never_succeeded_is_found() -> None:
    run = Run()
    run.job(10, "failed", workflow=100, error="RuntimeError: boom", error_kinds=("error",) * 2)
    run.job(11, workflow=100, after=(10,))
    run.workflow(100, "failed")
    run.attempt(10, 101, 0.0, end=(0.1, "error"))
    run.attempt(10, 102, 0.3, end=(0.4, "error"))
    run.attempt(11, 111, 1.0, commit=1.1, end=(1.2, "ok"))  # released after a failure
    assert EARLY_STEPS in found(run.judge())


def test_a_handler_reading_a_failed_upstream_under_the_default_policy_is_found() -> None:
    run = chain_run()
    run.lines = [
        Line(ln.kind, ln.job, ln.attempt, ln.token, ln.pid, ln.at, ln.run_at, ["s=failed"])
        if ln.kind == "upstream" and ln.job == 11
        else ln
        for ln in run.lines
    ]
    assert found(run.judge()) == {EARLY_STEPS: 1}


def retried_upstream_run(*, retry: bool) -> Run:
    """Job 10 fails an attempt and runs again; 12 (runs anyway) starts between
    the two: a release on the first attempt's end, unless the workflow was
    retried in between."""
    run = Run()
    run.job(10, workflow=100, error_kinds=("error",))
    run.job(12, workflow=100, policy="run", after=(10,))
    run.workflow(100, "succeeded")
    run.attempt(10, 101, 0.0, steps=(0.1,), end=(0.2, "error"))
    run.attempt(12, 121, 0.5, commit=0.6, end=(0.7, "ok"))
    run.attempt(10, 102, 1.0, commit=1.1, end=(1.2, "ok"))
    if retry:
        run.actions.append(Action("retry", 100, 0.8, 0.9))
    return run


def test_a_step_that_runs_anyway_released_before_its_upstream_ended_is_found() -> None:
    assert found(retried_upstream_run(retry=False).judge()) == {EARLY_STEPS: 1}
    assert found(retried_upstream_run(retry=True).judge()) == {}


def test_a_step_that_runs_anyway_started_while_its_upstream_worked_is_found() -> None:
    run = Run()
    run.job(10, "failed", workflow=100, error="RuntimeError: boom", error_kinds=("error",))
    run.job(12, workflow=100, policy="run", after=(10,))
    run.workflow(100, "failed")
    run.attempt(10, 101, 0.0, steps=(0.1, 0.6), end=(0.7, "error"))
    run.attempt(12, 121, 0.5, commit=0.9, end=(1.0, "ok"))
    assert found(run.judge()) == {EARLY_STEPS: 1}


def test_a_workflow_not_ended_after_the_drain_is_stuck() -> None:
    """Its step never released: due after the load's end, so not counted lost."""
    run = Run()
    run.job(10, workflow=100)
    run.job(11, "waiting", workflow=100, after=(10,))
    run.jobs[11]["run_at"] = LOAD_ENDED + 1
    run.workflow(100, "running")
    run.workflow(101, "running", created_at=LOAD_ENDED + 1)  # enqueued after the load: not judged
    run.attempt(10, 101, 0.0, commit=0.1, end=(0.2, "ok"))
    verdict = run.judge()
    assert found(verdict) == {STUCK: 1}
    assert verdict.examples[STUCK] == [(100, {"waiting": 1})]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"state": "failed", "last_error": "boom"}, "its handler's commit is recorded"),
        ({"state": "cancelled", "error_kinds": ["cancelled"]}, "its handler's commit is recorded"),
    ],
)
def test_a_committed_job_that_ended_otherwise_is_not_explained(
    change: dict[str, Any], why: str
) -> None:
    run = limited_run()
    run.jobs[1].update(change)
    verdict = run.judge()
    assert found(verdict) == {UNEXPLAINED: 1}
    assert why in str(verdict.examples[UNEXPLAINED])


def test_ends_without_a_cause_are_not_explained() -> None:
    run = Run()
    run.job(1, limited=True)  # succeeded, its handler never committed
    run.job(2, "failed", limited=True, error_kinds=("error",))  # no error text
    run.job(3, "cancelled", limited=True, error_kinds=("cancelled",))  # nobody cancels these
    run.job(10, workflow=100)
    run.job(11, "cancelled", workflow=100, after=(10,), error_kinds=("cancelled",))
    run.workflow(100, "cancelled")
    run.attempt(10, 101, 0.0, commit=0.1, end=(0.2, "ok"))
    verdict = run.judge()
    assert found(verdict) == {UNEXPLAINED: 4}, verdict.examples  # 11: its upstream succeeded
    reasons = Counter(str(reason).split(" (")[0] for _, reason in verdict.examples[UNEXPLAINED])
    assert reasons == {
        "succeeded without its handler's commit": 1,
        "failed without an error": 1,
        "cancelled without a cause": 2,
    }


def test_cancels_with_a_cause_are_explained() -> None:
    run = Run()
    run.job(10, "failed", workflow=100, error="RuntimeError: boom", error_kinds=("error",) * 2)
    run.job(11, "cancelled", workflow=100, after=(10,), error_kinds=("cancelled",))
    run.job(20, "cancelled", workflow=200, error_kinds=("cancelled",))
    run.workflow(100, "failed")
    run.workflow(200, "cancelled")
    run.attempt(10, 101, 0.0, end=(0.1, "error"))
    run.attempt(10, 102, 0.2, end=(0.3, "error"))
    run.actions.append(Action("cancel", 200, 0.0, 0.1))  # the operator's
    assert found(run.judge()) == {}
    run.actions.clear()
    assert found(run.judge()) == {UNEXPLAINED: 1}


def test_a_workflow_whose_end_does_not_follow_from_its_steps_is_not_explained() -> None:
    run = chain_run()
    run.workflow(100, "failed")  # every step succeeded
    verdict = run.judge()
    assert found(verdict) == {UNEXPLAINED: 1}
    assert "its steps say succeeded" in str(verdict.examples[UNEXPLAINED])
