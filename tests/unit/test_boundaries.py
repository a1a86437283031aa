"""The layering of the code is checked by `make check` (scripts/check-boundaries)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "check-boundaries"


def check(root: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(SCRIPT), *([str(root)] if root else [])]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_the_code_crosses_no_boundary() -> None:
    result = check()
    assert result.returncode == 0, result.stdout


def test_a_store_module_importing_the_worker_is_refused(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "due"
    (package / "store").mkdir(parents=True)
    (package / "store" / "jobs.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from due.core.jobs import Job\n"
        "if TYPE_CHECKING:\n"
        "    from due.app import App\n"  # types only: allowed
        "from due.worker.worker import Worker\n"
    )
    result = check(package)
    assert result.returncode == 1
    assert "due/store/jobs.py:5: store imports due.worker.worker" in result.stdout
    assert "due.app" not in result.stdout and "due.core" not in result.stdout


def test_core_importing_the_store_is_refused(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "due"
    (package / "core").mkdir(parents=True)
    (package / "core" / "records.py").write_text("import due.store.backend\n")
    result = check(package)
    assert result.returncode == 1 and "core imports due.store.backend" in result.stdout
