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


def test_the_core_importing_a_framework_integration_is_refused(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "due"
    (package / "cli").mkdir(parents=True)
    (package / "contrib" / "django").mkdir(parents=True)
    (package / "cli" / "common.py").write_text("from due.contrib.django import due_app\n")
    (package / "contrib" / "django" / "backend.py").write_text("from due.app import App\n")
    (package / "app.py").write_text("import due.contrib.django.cli\n")
    result = check(package)
    assert result.returncode == 1
    assert "due/cli/common.py:1: cli imports due.contrib.django" in result.stdout
    assert "due/app.py:1: app imports due.contrib.django.cli" in result.stdout
    assert "backend.py" not in result.stdout  # contrib may use the rest of due
