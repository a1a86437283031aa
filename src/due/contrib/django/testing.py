"""Django's test runner, closing due's connections before the test databases go.

::

    TEST_RUNNER = "due.contrib.django.testing.DueTestRunner"

due's App keeps connections of its own to the test database (it reads and
writes jobs there); PostgreSQL refuses to drop a database that connections
still use. This runner closes them first; everything else is Django's
`DiscoverRunner`.
"""

from __future__ import annotations

from typing import Any

from django.test.runner import DiscoverRunner

from due.contrib.django.apps_registry import close_apps


class DueTestRunner(DiscoverRunner):  # type: ignore[misc]
    """`DiscoverRunner` that closes due's connections before dropping the test databases."""

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close_apps()
        super().teardown_databases(old_config, **kwargs)
