"""Django tests as a user writes them (run by `manage.py test shop`): the jobs
go to the test databases Django's runner made."""

from django.db import connections
from django.tasks import TaskResultStatus
from django.test import TestCase, TransactionTestCase

from due import JobNotFoundError
from due.contrib.django import due_app
from due.testing import drain
from shop.tasks import send_welcome_email


class EnqueueTests(TestCase):
    """A TestCase runs in a transaction: its jobs are seen in it, never committed."""

    databases = {"default", "pg"}

    def test_a_job_is_seen_in_the_test_s_transaction(self):
        for alias in ("default", "pg"):
            result = send_welcome_email.using(backend=alias).enqueue(f"{alias}@example.com")
            result.refresh()  # on Django's connection, in the test's transaction
            self.assertEqual(result.status, TaskResultStatus.READY)
            with self.assertRaises(JobNotFoundError):  # due's own: not committed
                due_app(alias).get(int(result.id))


class RunTests(TransactionTestCase):
    """Running jobs needs them committed: a TransactionTestCase."""

    databases = {"default", "pg"}

    def test_the_jobs_run_in_the_test_databases(self):
        for alias in ("default", "pg"):
            test_name = str(connections[alias].settings_dict["NAME"])
            app = due_app(alias)
            self.assertIn(test_name.rsplit("/", 1)[-1], app.url)
            result = send_welcome_email.using(backend=alias).enqueue(f"{alias}@example.com")
            drain(app)
            result.refresh()
            self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
            self.assertEqual(result.return_value["sent_to"], f"{alias}@example.com")


class Leftovers:
    """Django empties its tables after each TransactionTestCase test; due's test
    runner empties due's then too: a test never sees the jobs of the one before."""

    aliases = ("default", "pg")

    def test_1_leaves_its_jobs_queued(self):
        for alias in self.aliases:
            send_welcome_email.using(backend=alias).enqueue(f"{alias}@example.com")
            self.assertEqual(len(due_app(alias).jobs()), 1)

    def test_2_starts_with_no_job(self):
        for alias in self.aliases:
            self.assertEqual(due_app(alias).jobs(), [])
            self.assertEqual(drain(due_app(alias)).succeeded, [])


class LeftoverTests(Leftovers, TransactionTestCase):
    databases = {"default", "pg"}


class LeftoverOnPostgresTests(Leftovers, TransactionTestCase):
    """Only PostgreSQL's jobs: a process of --parallel started by forkserver or
    spawn has its SQLite test database in memory, where due cannot go."""

    databases = {"default", "pg"}
    aliases = ("pg",)


class LeftoverWithAvailableAppsTests(Leftovers, TransactionTestCase):
    """Django flushes only these apps' tables, and sends no post_migrate."""

    databases = {"default", "pg"}
    aliases = ("pg",)
    available_apps = ["shop"]
