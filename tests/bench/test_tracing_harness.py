"""bench/tracing_bench.py, run small (make test-bench): does it still measure?"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.bench.test_harnesses import drop_scratch_databases, run_apart

pytestmark = pytest.mark.bench


def test_the_tracing_benchmark_drains_every_kind_on_both_stores(tmp_path: Path) -> None:
    """Its figures mean nothing at these sizes, but every job of every kind
    (untraced, the no-op tracer, the SDK) must be drained by a real worker."""
    command = [sys.executable, "bench/tracing_bench.py", "--quick"]
    try:
        done = run_apart(command, tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (tmp_path / "results" / "results.jsonl").read_text().splitlines()
    seen = {(r["backend"], r["kind"]): r["jobs"] for r in map(json.loads, lines)}
    assert seen == {
        (backend, kind): 300
        for backend in ("sqlite", "postgres")
        for kind in ("off", "noop", "sdk")
    }
    assert "sdk/off" in done.stdout and "us per job" in done.stdout
    assert "| attempt, whole |" in done.stdout  # the hooks measured in process too
