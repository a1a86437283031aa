"""Django's test runner, with due's tables emptied between TransactionTestCase's
tests and due's connections closed before the test databases go.

::

    TEST_RUNNER = "due.contrib.django.testing.DueTestRunner"

Django empties its models' tables after each `TransactionTestCase` test (its
`flush`); due's tables are not models, so this runner empties them then too
(`due.testing.empty`), for every backend whose jobs live in a Django database
("DATABASE"): a test does not run the jobs an earlier one left. Not with
`available_apps` or `serialized_rollback`, where Django sends no signal after
its flush: call `due.testing.empty(due_app())` in `setUp` there.

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

from django.apps import apps
from django.db import connections
from django.db.models.signals import post_migrate
from django.test.runner import DiscoverRunner

from due.contrib.django.apps_registry import close_apps
from due.contrib.django.schema import empty_after_flush

EMPTY_AFTER_FLUSH = "due.empty_after_flush"


class DueTestRunner(DiscoverRunner):  # type: ignore[misc]
    """`DiscoverRunner` that empties due's tables when Django flushes its own, and
    closes due's connections before dropping the test databases."""

    def setup_test_environment(self, **kwargs: Any) -> None:
        super().setup_test_environment(**kwargs)
        post_migrate.connect(
            empty_after_flush, sender=apps.get_app_config("due"), dispatch_uid=EMPTY_AFTER_FLUSH
        )

    def teardown_test_environment(self, **kwargs: Any) -> None:
        post_migrate.disconnect(sender=apps.get_app_config("due"), dispatch_uid=EMPTY_AFTER_FLUSH)
        super().teardown_test_environment(**kwargs)

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
