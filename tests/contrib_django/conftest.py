"""A real Django project (tests/contrib_django/project) with due as its task backend,
set up once per test process: a SQLite file and a PostgreSQL database of its
own, migrated by `manage.py migrate` as a user's would be.

The PostgreSQL database is named after the process (`due_django_gw0_<pid>`):
the server is the machine's, shared with every other test run, and a name
two runs share would have each drop the other's database (and Django's test
runner its `test_` copy) under its sessions. Dropped at the end; those of
processes killed outright are dropped by the next run.

The tests run on the newest Python (Django 6 needs 3.12 or newer):
`scripts/test-django`, which `make test` runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

PROJECT = Path(__file__).parent / "project"
ADMIN_URL = "postgresql://127.0.0.1:5432/postgres"
WORKER_ID = os.environ.get("PYTEST_XDIST_WORKER", "main")
DATABASES = ("default", "pg")
BACKEND_OF = {"default": "default", "pg": "pg"}

_folder = tempfile.mkdtemp(prefix="due-django-")
os.environ["DUE_TEST_SQLITE"] = os.path.join(_folder, "db.sqlite3")
# The process id too: another checkout's run beside this one has workers of the
# same names, and dropping "its" database (WITH FORCE) cut this run's connections.
os.environ["DUE_TEST_POSTGRES"] = f"due_django_{WORKER_ID}_{os.getpid()}"
OURS = re.compile(r"(?:test_)?due_django_(?:gw\d+|main)_(\d+)(?:_\d+)?")
"""A database of this conftest's processes (or Django's test copy of one):
the pid of the process it belongs to."""
os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))


def _fresh_postgres_database() -> None:
    name = os.environ["DUE_TEST_POSTGRES"]
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        for (left,) in conn.execute("SELECT datname FROM pg_database").fetchall():
            if (match := OURS.fullmatch(left)) and not _alive(int(match[1])):
                conn.execute(f'DROP DATABASE IF EXISTS "{left}" WITH (FORCE)')
        # Ours by its name: a process of this pid that was killed left it.
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pytest_configure(config: pytest.Config) -> None:
    import django
    from django.core.management import call_command

    _fresh_postgres_database()
    django.setup()
    for alias in DATABASES:
        call_command("migrate", database=alias, verbosity=0)


def pytest_unconfigure(config: pytest.Config) -> None:
    from django.db import connections

    connections.close_all()
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{os.environ["DUE_TEST_POSTGRES"]}" WITH (FORCE)')


def project_env(**extra: str) -> dict[str, str]:
    """The environment of the project's processes (manage.py, due --django)."""
    env = dict(os.environ)
    env.pop("PYTEST_XDIST_WORKER", None)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def manage(*arguments: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """`python manage.py ...` in the project, to its end."""
    return subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=PROJECT,
        env=project_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest) -> str:
    """The Django database alias (and task backend) a test runs on: SQLite or PostgreSQL."""
    return str(request.param)


@pytest.fixture
def app(database: str) -> Iterator[object]:
    """The due App behind the database's task backend."""
    from due.contrib.django import due_app

    yield due_app(BACKEND_OF[database])
