"""The documentation site builds with no warning, as `make docs` builds it.

Strict (-W --keep-going), nitpicky (-n: every cross-reference resolves), from a
fresh environment (-E), into a temporary folder. It needs no network: the site
uses no intersphinx, so nothing is fetched.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
DOCS = REPOSITORY / "docs"
STRICT = ["-W", "--keep-going", "-n", "-E"]


def docs_recipe() -> str:
    makefile = (REPOSITORY / "Makefile").read_text()
    return makefile.split("\ndocs:", 1)[1].split("\n\n", 1)[0]


def test_make_docs_builds_as_strictly_as_this_test() -> None:
    recipe = docs_recipe()
    assert all(f" {flag} " in recipe for flag in STRICT), recipe


def test_the_site_fetches_nothing() -> None:
    assert "sphinx.ext.intersphinx" not in (DOCS / "conf.py").read_text()


@pytest.mark.slow
def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", *STRICT, "-q", str(DOCS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPOSITORY,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "reference" / "api.html").exists()
