"""A TransactionTestCase with serialized_rollback, in a module of its own: Django
reloads the data it serialised at the start, which meets the content types
an `available_apps` class before it left (shop.tests), whatever due does.
Named by its label (`manage.py test shop.rollback_tests`), never found by
`manage.py test shop`."""

from django.test import TransactionTestCase

from shop.tests import Leftovers


class LeftoverWithSerializedRollbackTests(Leftovers, TransactionTestCase):
    """Django sends no post_migrate after this flush either."""

    databases = {"default", "pg"}
    serialized_rollback = True
