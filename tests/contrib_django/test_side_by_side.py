"""Two runs of these tests side by side on the machine's shared PostgreSQL (a
second `make test`, another engineer's, CI): neither touches the other's
database."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings

from tests.contrib_django.conftest import PROJECT

pytestmark = pytest.mark.slow
REPOSITORY = PROJECT.parents[2]


@pytest.mark.timeout(180)
def test_another_run_beside_this_one_keeps_away_from_its_database() -> None:
    """Another run, in a process of the same xdist name as this one's: before,
    both named their database after it, and the other dropped this one's
    (WITH FORCE: ending its sessions) to make its own."""
    mine = settings.DATABASES["pg"]["NAME"]
    other_env = {k: v for k, v in os.environ.items() if k != "DUE_TEST_POSTGRES"}
    with psycopg.connect(f"postgresql://127.0.0.1:5432/{mine}", autocommit=True) as witness:
        other = subprocess.run(
            [
                *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"),
                "tests/contrib_django/test_settings.py::test_the_backend_options_are_checked",
            ],
            cwd=REPOSITORY,
            env=other_env,  # PYTEST_XDIST_WORKER kept: the same name as this process's
            capture_output=True,
            text=True,
            timeout=150,
        )
        assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
        assert witness.execute("SELECT current_database()").fetchone() == (mine,)
