"""Workflows in real worker processes, both backends: a graph of a few hundred
steps with fan-out and fan-in while one worker is killed and another paused,
and the failure policies.

The witnesses: the ledger the handlers write (what ran, when, in which
process) and the database (each step's state, attempt and result). A step's
result is a digest of its input and of what `ctx.upstream` gave it, so the
test recomputes, from the stored results of its upstream steps, what each
step must have seen. The promise checked (DESIGN invariant 15): a step is
released once, after the end of the last of its upstream steps, and never
lost; so no step starts before each of its upstream steps' succeeding attempt
ended, and each runs to success once (again only if a lease was lost).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest

import due
from due.workflows import Workflow
from tests.apps import workflows_app
from tests.apps.workflows_app import value_of
from tests.helpers.database import rows
from tests.helpers.waiting import wait_until
from tests.helpers.workers import WorkerProcess, Workers, app_with_tasks_of, ledger_records

pytestmark = pytest.mark.slow
WORKFLOWS_APP = "tests.apps.workflows_app:app"
WORKERS = 3


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    """The workflows app's tasks, on this test's database, real clock."""
    application = app_with_tasks_of(backend_url, workflows_app.app)
    yield application
    application.close()


def start_workers(workers: Workers, *options: str) -> list[WorkerProcess]:
    started = [
        workers.start("-c", "4", "--log-level", "debug", *options, app=WORKFLOWS_APP)
        for _ in range(WORKERS)
    ]
    for worker in started:
        workers.wait_ready(worker)
    return started


# --- what ran, and what the database says --------------------------------------------


def runs_of(workers: Workers) -> dict[str, dict[str, Any]]:
    """Each run of a handler that began, by its token: job, attempt, pid, step,
    start, end (None if it has not ended)."""
    found: dict[str, dict[str, Any]] = {}
    for kind in ("start", "end"):
        for _, job, attempt, pid, at, step, run in ledger_records(workers.ledger, kind):
            entry = found.setdefault(
                run,
                {"job": int(job), "attempt": int(attempt), "pid": int(pid), "step": step},
            )
            entry.setdefault("end", None)
            entry[kind] = float(at)
    return found


def steps_of(url: str, workflow: int) -> dict[str, dict[str, Any]]:
    """Each step of the workflow by name: its job id, state, attempt and result."""
    found = rows(
        url,
        "SELECT id, step_name, state, attempt, result FROM due_jobs "
        f"WHERE workflow_id = {int(workflow)}",
    )
    steps = {}
    for job, name, state, attempt, stored in found:
        result = json.loads(stored) if url.startswith("sqlite") and stored is not None else stored
        steps[name] = {"id": int(job), "state": state, "attempt": int(attempt), "result": result}
    return steps


def check_order(
    steps: dict[str, dict[str, Any]],
    after: dict[str, tuple[str, ...]],
    ran: dict[str, dict[str, Any]],
    ended: dict[str, str],
) -> int:
    """Every start of every step comes after the end of each upstream step's
    run in `ended` (by token; upstream steps not in it are skipped); the count
    of (step, upstream) pairs checked."""
    starts: dict[int, list[float]] = {}
    for run in ran.values():
        starts.setdefault(run["job"], []).append(run["start"])
    checked = 0
    for name, upstream in after.items():
        first = min(starts.get(steps[name]["id"], [float("inf")]))
        for other in upstream:
            if other not in ended:
                continue
            end = ran[ended[other]]["end"]
            assert end is not None, f"{other}'s run {ended[other]} has no end in the ledger"
            assert first > end, (
                f"step {name!r} started at {first:.6f}, before upstream {other!r} "
                f"ended at {end:.6f}"
            )
            checked += 1
    return checked


# --- 1. a few hundred steps, a killed worker and a paused one --------------------------

FAN = 120
JOIN = 10  # leaves per fan-in step


def build_graph(app: due.App) -> tuple[Workflow, dict[str, int]]:
    """root -> fan-0..119 -> leaf-i (one each) -> join-0..11 (ten leaves each,
    and the fan step of their first leaf) -> final: 254 steps. Each sleeps
    10 to 30 ms; its seed is its position."""
    node = app.tasks.get("node")
    flow = app.workflow("fan-out and in")
    seeds: dict[str, int] = {}

    def add(name: str, after: list[Any]) -> Any:
        seeds[name] = len(seeds)
        ms = 10 + (seeds[name] * 7) % 21
        return flow.add(node.request(name, seeds[name], ms), name=name, after=after)

    root = add("root", [])
    fans = [add(f"fan-{i}", [root]) for i in range(FAN)]
    leaves = [add(f"leaf-{i}", [fans[i]]) for i in range(FAN)]
    joins = [
        add(f"join-{j}", [*leaves[j * JOIN : (j + 1) * JOIN], fans[j * JOIN]])
        for j in range(FAN // JOIN)
    ]
    add("final", joins)
    return flow, seeds


def test_a_big_graph_runs_each_step_once_after_its_upstream_under_faults(
    app: due.App, workers: Workers
) -> None:
    doomed, *others = start_workers(workers, "--lease", "2s")
    flow, seeds = build_graph(app)
    handle = flow.enqueue()
    assert len(handle.job_ids) == 254

    def open_runs(worker: WorkerProcess) -> set[int]:
        return {
            run["job"]
            for run in runs_of(workers).values()
            if run["pid"] == worker.pid and run["end"] is None
        }

    # Kill it while it runs a step: stopped first, so that the ledger read and the
    # kill see the same moment (a step lasts 10 to 30 ms, and the root runs
    # alone: one that ended between a read and a kill left nothing lost).
    for _ in range(50):
        wait_until(lambda: open_runs(doomed), timeout=20, what="the doomed worker to run a step")
        doomed.signal(signal.SIGSTOP)
        if open_runs(doomed):
            break
        doomed.signal(signal.SIGCONT)
    doomed.signal(signal.SIGKILL)
    # Pause a worker that runs a step now (the ledger says it began and has not
    # ended): resumed and tried again if it ended before the pause took.
    paused: WorkerProcess | None = None
    frozen: set[int] = set()
    for _ in range(50):
        busy = wait_until(
            lambda: [worker for worker in others if open_runs(worker)],
            timeout=20,
            what="a worker to run a step",
        )
        workers.pause(busy[0])
        frozen = open_runs(busy[0])
        if frozen:
            paused = busy[0]
            break
        busy[0].signal(signal.SIGCONT)
    assert paused is not None, "no worker was caught running a step"
    wait_until(
        lambda: all(
            rows(app.url, f"SELECT 1 FROM due_jobs WHERE id = {job} AND state != 'running'")
            for job in frozen
        ),
        timeout=30,
        what="the paused worker's steps to be rescued",
    )
    paused.signal(signal.SIGCONT)
    status = app.wait_workflow(handle.id, timeout="90s")

    assert status.state == "succeeded"
    assert status.finished_at is not None and status.steps_ended == 254
    steps = steps_of(app.url, handle.id)
    assert {step["state"] for step in steps.values()} == {"succeeded"}
    after = {name: step.after for name, step in status.steps.items()}
    assert after["final"] == tuple(sorted(f"join-{j}" for j in range(FAN // JOIN)))
    ran = runs_of(workers)
    # ctx.upstream was right: each value recomputed from the upstream's stored results.
    for name, step in steps.items():
        upstream = {other: steps[other]["result"] for other in after[name]}
        assert step["result"]["value"] == value_of(name, seeds[name], upstream), name
    # Each succeeding run is in the ledger, and no step began before each of
    # its upstream steps' succeeding run had ended.
    ended = {name: step["result"]["run"] for name, step in steps.items()}
    assert all(ran[run]["end"] is not None for run in ended.values())
    assert all(ran[ended[name]]["attempt"] == step["attempt"] for name, step in steps.items())
    edges = sum(len(upstream) for upstream in after.values())
    assert check_order(steps, after, ran, ended) == edges == 2 * FAN + (FAN // JOIN) * (JOIN + 2)
    # Ran again only if a lease was lost: a step that ran more than once, or
    # whose attempt is past 1, began on the killed or the paused worker.
    faulted = {doomed.pid, paused.pid}
    by_job: dict[int, list[dict[str, Any]]] = {}
    for run in ran.values():
        by_job.setdefault(run["job"], []).append(run)
    for name, step in steps.items():
        runs = by_job[step["id"]]
        said = (name, step["attempt"], runs)
        if len(runs) > 1 or step["attempt"] > 1:
            assert any(run["pid"] in faulted for run in runs), said
        assert len([run for run in runs if run["pid"] not in faulted]) <= 1, said
        assert step["attempt"] <= len(runs), said
    assert len(by_job[steps["final"]["id"]]) == 1, "the final step ran once"
    # The faults were real: steps begun on the killed worker, and those the
    # paused one was running, ran again.
    lost = {run["job"] for run in ran.values() if run["pid"] == doomed.pid and not run["end"]}
    assert lost and all(len(by_job[job]) > 1 for job in lost)
    assert frozen and all(len(by_job[job]) > 1 for job in frozen)


# --- 2. failure policies --------------------------------------------------------------------

BRANCHES = 4
EXPECTED = {
    "top": "succeeded",
    "bad": "failed",
    "c1": "cancelled",
    "c2": "cancelled",
    "c3": "cancelled",
    "ok": "succeeded",
    "look": "succeeded",
    "look2": "succeeded",
    "then": "succeeded",
}


def test_a_failed_step_cancels_its_dependents_and_a_run_step_runs_anyway(
    app: due.App, workers: Workers
) -> None:
    """In each branch: top -> bad (fails) -> c1 -> c2 -> c3 (also after ok),
    all cancelled down the line; top -> ok; look after bad and ok, and look2
    after c2, run anyway and see what happened; then after both looks runs as
    any step. The workflow ends failed."""
    start_workers(workers)
    node, broken, observe = (app.tasks.get(name) for name in ("node", "broken", "observe"))
    flow = app.workflow("policies")
    seeds: dict[str, int] = {}

    def step(name: str, after: list[Any]) -> Any:
        seeds[name] = len(seeds)
        return flow.add(node.request(name, seeds[name], 20), name=name, after=after)

    for k in range(BRANCHES):
        top = step(f"top-{k}", [])
        bad = flow.add(broken.request(f"bad-{k}"), name=f"bad-{k}", after=[top])
        c1 = step(f"c1-{k}", [bad])
        c2 = step(f"c2-{k}", [c1])
        ok = step(f"ok-{k}", [top])
        step(f"c3-{k}", [c2, ok])
        look = flow.add(
            observe.request(f"look-{k}"),
            name=f"look-{k}",
            after=[bad, ok],
            on_upstream_failure="run",
        )
        look2 = flow.add(
            observe.request(f"look2-{k}"),
            name=f"look2-{k}",
            after=[c2],
            on_upstream_failure="run",
        )
        step(f"then-{k}", [look, look2])
    handle = flow.enqueue()
    status = app.wait_workflow(handle.id, timeout="60s")

    assert status.state == "failed"
    assert status.finished_at is not None and status.steps_ended == len(handle.job_ids)
    steps = steps_of(app.url, handle.id)
    assert {name: step["state"] for name, step in steps.items()} == {
        f"{name}-{k}": state for k in range(BRANCHES) for name, state in EXPECTED.items()
    }
    ran = runs_of(workers)
    began = {run["step"] for run in ran.values()}
    for k in range(BRANCHES):
        # Cancelled down the line, never started.
        assert not {f"c1-{k}", f"c2-{k}", f"c3-{k}"} & began
        ok = steps[f"ok-{k}"]["result"]
        assert steps[f"look-{k}"]["result"] | {"run": ""} == {
            "states": {f"bad-{k}": "failed", f"ok-{k}": "succeeded"},
            "upstream": {f"bad-{k}": None, f"ok-{k}": ok},
            "run": "",
        }
        assert steps[f"look2-{k}"]["result"] | {"run": ""} == {
            "states": {f"c2-{k}": "cancelled"},
            "upstream": {f"c2-{k}": None},
            "run": "",
        }
        upstream = {name: steps[name]["result"] for name in (f"look-{k}", f"look2-{k}")}
        assert steps[f"then-{k}"]["result"]["value"] == value_of(
            f"then-{k}", seeds[f"then-{k}"], upstream
        )
        assert steps[f"bad-{k}"]["attempt"] == 1
    # Each step that ran, ran once, after its upstream steps' ends (c2's
    # cancellation came with bad's end: look2 began after bad ended).
    assert sorted(run["step"] for run in ran.values()) == sorted(
        name for name, step in steps.items() if step["state"] != "cancelled"
    )
    ended = {run["step"]: token for token, run in ran.items()}
    after = {name: step.after for name, step in status.steps.items()}
    for k in range(BRANCHES):
        after[f"look2-{k}"] = (*after[f"look2-{k}"], f"bad-{k}")
    checked = check_order(steps, {n: a for n, a in after.items() if n in ended}, ran, ended)
    assert (
        checked == BRANCHES * 7
    )  # top-bad, top-ok, bad-look, ok-look, bad-look2, look-then, look2-then
