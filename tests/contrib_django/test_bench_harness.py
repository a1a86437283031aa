"""bench/django_bench.py, run small (make test-bench): does it still measure?"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.bench.test_harnesses import drop_scratch_databases, run_apart

pytestmark = pytest.mark.bench


def test_the_django_benchmark_measures_enqueue_and_drain_on_both_stores(tmp_path: Path) -> None:
    """Its figures mean nothing at these sizes, but every job must be counted
    (enqueued through each API, drained by a real worker process) on both stores."""
    command = [sys.executable, "bench/django_bench.py", "--quick"]
    try:
        done = run_apart(command, tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (tmp_path / "results" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    seen = {(r["backend"], r["step"], r["kind"]): r["jobs"] for r in records}
    assert seen == {
        (backend, step, kind): 200 if step == "enqueue" else 500
        for backend in ("sqlite", "postgres")
        for step in ("enqueue", "drain")
        for kind in ("django", "due")
    }
    assert "django/due" in done.stdout
