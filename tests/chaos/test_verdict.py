"""The chaos verdict's row for task exits catches a worker a handler's
SystemExit stopped, and only that: hand-made ledgers through `judge`. (Its
other handlers may write on for a moment: a worker that exited wrote lines
after its handler's exit in a chaos run against the code before the fix.)"""

from __future__ import annotations

from typing import Any

from tests.chaos.faults import Fault
from tests.chaos.verdict import Line, Verdict, judge

ROW = "workers stopped by a task's exit"
WORKER, OTHER = 101, 102


def lines(job: int, token: int, pid: int, at: float, *kinds: str) -> list[Line]:
    detail = {"exit": ["SystemExit"], "end": ["error"]}
    return [
        Line(kind, job, 1, token, pid, at + 0.01 * n, 0.0, detail.get(kind, []))
        for n, kind in enumerate(kinds)
    ]


def judged(ledger: list[Line], faults: list[Fault], alive: set[int]) -> Verdict:
    jobs: dict[int, dict[str, Any]] = {
        job: {"state": "succeeded", "errors": 1, "run_at": 0.0, "attempt": 1}
        for job in {line.job for line in ledger}
    }
    return judge(
        backend="sqlite",
        seconds=10.0,
        load_ended=10.0,
        enqueued={job: 0.0 for job in jobs},
        jobs=jobs,
        successes=[],
        schedule_runs=[],
        ledger=ledger,
        faults=faults,
        leadership=[],
        alive_at_end=alive,
    )


EXITED = lines(1, 11, WORKER, 1.0, "start", "exit", "end")
"""A handler of WORKER raised SystemExit at 1.01 (its own `end` after it)."""


def test_a_worker_gone_after_its_handler_exited_is_found() -> None:
    verdict = judged(EXITED + lines(2, 21, OTHER, 1.5, "start", "end"), [], {OTHER})
    assert verdict.counts[ROW] == 1 and verdict.examples[ROW] == [(WORKER, 1, "SystemExit")]
    assert verdict.task_exits == 1 and not verdict.ok()


def test_a_worker_alive_at_the_end_or_stopped_by_a_fault_is_not() -> None:
    went_on = EXITED + lines(2, 21, WORKER, 1.5, "start", "end")
    assert judged(went_on, [], {WORKER}).counts[ROW] == 0
    for fault in ("kill", "kill_leader", "term"):
        assert judged(EXITED, [Fault(fault, 1.2, WORKER)], set()).counts[ROW] == 0
    draining = [Fault("term", 0.5, WORKER)]  # its handlers ran on, until the exit
    assert judged(EXITED, draining, set()).counts[ROW] == 0
    paused = [Fault("pause", 1.2, WORKER, 2.0)]  # a pause stops nothing
    assert judged(went_on, paused, set()).counts[ROW] == 1
