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
still use. This runner closes them first; everything else is Django's
`DiscoverRunner`.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
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

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close_apps()
        super().teardown_databases(old_config, **kwargs)
