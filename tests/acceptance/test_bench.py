"""`make bench` and `make soak` keep working between the runs that measure.

Small runs of the real harnesses: the benchmark with due and the bare loops on
both stores (the peers need bench/.venv-peers, which `make bench` creates), and
the soak for its shortest run. What is checked is that they run and judge, not
their figures: this machine runs other tests meanwhile.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers.workers import REPOSITORY

pytestmark = pytest.mark.slow
RATIO = re.compile(r"\b(\d+)/(\d+)\b")


def test_a_smoke_run_of_the_benchmark_measures_due_and_the_bare_loops() -> None:
    command = [
        sys.executable, "bench/run.py", "--quick", "--runs", "1", "--no-setup",
        "--only", "drain,enqueue,latency", "--libs", "due,raw_sqlite,raw_pg",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tables = done.stdout
    for backend, bare in (("sqlite", "raw_sqlite"), ("postgres", "raw_pg")):
        for title in (
            f"### Enqueue, single, {backend}",
            f"### Drain, noop, one worker process, {backend}",
            f"### Drain, sleep10, one worker process, {backend}",
            f"### Idle worker: pickup latency and lateness of +2 s jobs, {backend}",
        ):
            assert title in tables
        section = tables.split(f"### Drain, noop, one worker process, {backend}")[1]
        rows = section.split("###")[0].splitlines()
        assert any(row.startswith("| due |") for row in rows)
        assert any(row.startswith(f"| {bare} |") for row in rows)
    rows = [line for line in tables.splitlines() if line.startswith("| ")]
    checks = [found for row in rows for found in RATIO.findall(row)]
    assert checks, "no row says how many of its runs were exactly once"
    assert all(ok == runs for ok, runs in checks), [c for c in checks if c[0] != c[1]]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_shortest_soak_runs_and_judges(backend: str) -> None:
    rate = 200
    command = [
        sys.executable, "bench/soak.py", "--minutes", "0.5", "--rate", str(rate),
        "--backend", backend, "--retention", "5s",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=300)
    windows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(windows) == 3, done.stdout[-3000:] + done.stderr[-3000:]
    assert all(w["backend"] == backend and w["acknowledged_per_s"] > 0 for w in windows)
    acknowledged = sum(w["acknowledged_per_s"] for w in windows) / len(windows)
    assert acknowledged >= 0.8 * rate
    measures = ["acknowledged jobs/s", "claim latency p99 ms", "jobs table bytes"]
    if backend == "postgres":
        measures.append("dead tuples")
    for measure in measures:
        assert f"| {measure}" in done.stdout
    judged_bad = "| NO |" in done.stdout
    assert done.returncode == (1 if judged_bad else 0), done.stderr[-3000:]
