"""Several processes on one store at once: nothing lost, nothing claimed twice."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

import due
from tests.conftest import START
from tests.helpers import processes

PROCESSES = 4
spawn = multiprocessing.get_context("spawn")


def run_children(target, argument_sets: list[tuple]) -> None:  # type: ignore[no-untyped-def]
    start = spawn.Barrier(len(argument_sets))
    children = [spawn.Process(target=target, args=(*args, start)) for args in argument_sets]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=90)
    for child in children:
        if child.is_alive():
            child.kill()
    assert [child.exitcode for child in children] == [0] * len(children)


@pytest.mark.slow
def test_four_processes_claim_5000_jobs_each_exactly_once(
    app: due.App, backend_url: str, tmp_path: Path
) -> None:
    @app.task(name="noop")
    def noop(n: int) -> None: ...

    ids = [job.id for job in app.enqueue_many([noop.request(n) for n in range(5000)])]
    outputs = [tmp_path / f"claimed-{n}.json" for n in range(PROCESSES)]
    run_children(
        processes.claim_until_empty,
        [(backend_url, START.isoformat(), f"w{n}", 10, str(out)) for n, out in enumerate(outputs)],
    )
    claimed = [job_id for out in outputs for job_id in json.loads(out.read_text())]
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    assert sorted(claimed) == sorted(ids), "a job was lost"
    per_process = [len(json.loads(out.read_text())) for out in outputs]
    assert sum(1 for count in per_process if count > 0) >= 2, per_process
    assert app.jobs(state="succeeded", limit=10_000).__len__() == 5000


@pytest.mark.slow
def test_keys_hold_across_concurrent_processes(
    app: due.App, backend_url: str, tmp_path: Path
) -> None:
    keys = [f"user:{n}" for n in range(100)]
    outputs = [tmp_path / f"keys-{n}.json" for n in range(PROCESSES)]
    run_children(
        processes.enqueue_keys,
        [(backend_url, START.isoformat(), keys, n, str(out)) for n, out in enumerate(outputs)],
    )
    seen = [json.loads(out.read_text()) for out in outputs]
    assert all(mapping == seen[0] for mapping in seen), "processes got different jobs for a key"
    jobs = app.jobs(limit=1000)
    assert len(jobs) == len(keys)
    assert {job.key for job in jobs} == set(keys)
    assert {job.id for job in jobs} == set(seen[0].values())
