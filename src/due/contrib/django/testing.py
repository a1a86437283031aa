"""Django's test runner, with due's tables emptied after every TransactionTestCase
test and due's connections closed before the test databases are copied or go.

::

    TEST_RUNNER = "due.contrib.django.testing.DueTestRunner"

Django empties its models' tables after each `TransactionTestCase` test (its
`flush`); due's tables are not models, so this runner empties them then too
(`due.testing.empty`), in every database the test used, for every backend
whose jobs live there ("DATABASE"): a test does not run the jobs an earlier
one left. It is a cleanup each such test is given as the suite is built, not
a receiver of the `post_migrate` that Django's flush sends: Django sends
none with `available_apps` or `serialized_rollback`, nor for a database
without a model's table (one kept for the jobs), and a process that
`--parallel` starts with forkserver or spawn (Python 3.14 on Linux, macOS)
sets up Django's test environment, not this runner's. The cleanup travels
with its test into that process.

due's App keeps connections of its own to the test database (it reads and
writes jobs there); PostgreSQL refuses to drop a database that connections
still use, or to copy one (`--parallel`'s clones). This runner closes them
first; everything else is Django's `DiscoverRunner`.

On SQLite due's connections turn the test database to WAL mode, where the
last commits live in the `-wal` file until a checkpoint: Django clones the
file alone (`shutil.copy`), so before each clone this runner checkpoints it,
or the clones would lack due's tables (and whatever Django wrote after them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.db import connections
from django.test import TestCase, TransactionTestCase
from django.test.runner import DiscoverRunner
from django.test.utils import iter_test_cases

from due.contrib.django.apps_registry import close_apps
from due.contrib.django.schema import empty_databases


class DueTestRunner(DiscoverRunner):  # type: ignore[misc]
    """`DiscoverRunner` that empties due's tables after every test Django flushes
    after, and closes due's connections before copying or dropping the test
    databases."""

    def build_suite(self, *args: Any, **kwargs: Any) -> Any:
        suite = super().build_suite(*args, **kwargs)
        for test in iter_test_cases(suite):
            # A TestCase's transaction is rolled back: nothing to empty.
            if isinstance(test, TransactionTestCase) and not isinstance(test, TestCase):
                test.addCleanup(empty_after, type(test))
        return suite

    def setup_databases(self, **kwargs: Any) -> Any:
        with _whole_clones():
            return super().setup_databases(**kwargs)

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close_apps()
        super().teardown_databases(old_config, **kwargs)


@contextlib.contextmanager
def _whole_clones() -> Iterator[None]:
    """Every connection's `clone_test_db` closes due's connections, and
    checkpoints a SQLite file, before Django copies the test database."""
    wrapped = []
    for alias in connections:
        creation = connections[alias].creation
        creation.clone_test_db = _before_cloning(alias, creation.clone_test_db)
        wrapped.append(creation)
    try:
        yield
    finally:
        for creation in wrapped:
            del creation.clone_test_db  # the class's method again


def _before_cloning(alias: str, clone: Any) -> Any:
    def clone_test_db(*args: Any, **kwargs: Any) -> Any:
        close_apps()
        connection = connections[alias]
        if connection.vendor == "sqlite" and not connection.is_in_memory_db():
            with connection.cursor() as cursor:
                # Only Django's connection is left: the WAL goes into the file,
                # which is then whole.
                busy = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if busy:
                raise RuntimeError(
                    f"due: the test database of {alias!r} is in use by another "
                    "connection: its WAL cannot go into the file Django copies"
                )
        return clone(*args, **kwargs)

    return clone_test_db


def empty_after(test_class: type[TransactionTestCase]) -> None:
    """A TransactionTestCase test's cleanup: due's tables emptied in the
    databases Django flushes after it (a mirror is its primary's database)."""
    empty_databases(test_class._databases_names(include_mirrors=False))
