"""`DueBackend`: Django's task backend contract, carried out by due."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.tasks import Task, TaskResult
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from due.app import App
from due.contrib.django.apps_registry import app_for, database_alias, when_made
from due.contrib.django.arguments import normalised
from due.contrib.django.configuration import configure
from due.contrib.django.database import connection_in_transaction
from due.contrib.django.results import result_of, task_as_sent
from due.contrib.django.running import registered
from due.contrib.django.running import send_robustly as _send
from due.contrib.django.task_class import DueTask
from due.errors import ConfigurationError, JobNotFoundError, NotMigratedError
from due.task import Task as DueAppTask


class DueBackend(BaseTaskBackend):  # type: ignore[misc]
    """Django's task backend on due: `TASKS = {"default": {"BACKEND":
    "due.contrib.django.DueBackend", "QUEUES": [...], "OPTIONS": {"DATABASE":
    "default"}}}`.

    A job enqueued inside `transaction.atomic()` on the `DATABASE` alias is
    written in that transaction. `OPTIONS` takes `DATABASE` (an alias of
    `DATABASES`, default "default") or `URL` (any due database URL).
    """

    task_class = DueTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        require_the_app(alias)
        self.params = params
        self.database = database_alias(params)
        """The Django database alias whose transactions enqueue joins (None with a URL)."""
        self._valid_shapes: set[tuple[Any, ...]] = set()
        self._app: tuple[tuple[Any, ...], App] | None = None
        self.app  # noqa: B018  (made now: a bad OPTIONS fails at start, not at first use)

    @property
    def app(self) -> App:
        """The due App this backend enqueues with (shared by every thread)."""
        # Looked up again only when the database's settings may have changed
        # (Django's test runner renames it; override_settings replaces it): a
        # cost per enqueue otherwise.
        seen = self._database_settings()
        if self._app is None or self._app[0] != seen:
            self._app = (seen, app_for(self.alias, self.params))
        return self._app[1]

    def _database_settings(self) -> tuple[Any, ...]:
        if self.database is None:
            return ()
        entry = settings.DATABASES.get(self.database) or {}
        return (id(entry), *(entry.get(key) for key in ("NAME", "HOST", "PORT", "USER")))

    def validate_task(self, task: Task) -> None:
        """Django's checks, then due's: the task is registered with the App (its
        options checked) the first time it is seen."""
        self._checked(task, self.app)

    def _checked(self, task: Task, app: App) -> DueAppTask[Any, Any]:
        # Django's checks of a task's shape read its signature, a cost per
        # enqueue (`using()` makes a new task each time): done once per shape
        # and per set of this backend's features (a test may turn one off) and
        # QUEUES; a run_after is checked each time.
        shape = (
            task.func,
            task.takes_context,
            task.priority,
            task.queue_name,
            self.supports_async_task,
            self.supports_priority,
            id(self.queues),
        )
        if task.run_after is not None or shape not in self._valid_shapes:
            super().validate_task(task)
            self._valid_shapes.add(shape)
        try:
            return registered(app, self.alias, task, type(self))
        except ConfigurationError as error:  # a bad option of due's
            raise InvalidTask(str(error)) from error

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Write the job (in the request's transaction on `DATABASE`, when in one)."""
        app = self.app
        due_task = self._checked(task, app)
        config = due_task.config  # given only where they differ: each given one is checked again
        options = due_task.options(
            queue=task.queue_name if task.queue_name != config.queue else None,
            priority=task.priority if task.priority != config.priority else None,
            run_at=_aware(task.run_after),
            key=getattr(task, "key", None),
            limit_keys=getattr(task, "limit_keys", None),
        )
        args, kwargs = normalised(task.module_path, args, kwargs)
        connection = connection_in_transaction(self.database)
        with self._schema_told_for_django():
            job = app.enqueue_many([options.request(*args, **kwargs)], connection=connection)[0]
        result = result_of(job, self.alias, task)
        sent = functools.partial(_send, task_enqueued, type(self), result)
        if connection is not None and self.database and connections[self.database].in_atomic_block:
            # Enqueued when the transaction commits: a receiver never hears of a
            # job that a rollback takes back (and whose id another job may get).
            transaction.on_commit(sent, using=self.database)
        else:
            sent()
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result as stored now (TaskResultDoesNotExist for an unknown id);
        inside a transaction on `DATABASE`, as that transaction sees it."""
        text = str(result_id)
        if not (text.isascii() and text.isdecimal() and len(text) <= 18):
            raise TaskResultDoesNotExist(f"no task result {result_id!r}: due's ids are numbers")
        # Inside a transaction on DATABASE, as that transaction sees it: a job it
        # enqueued is found before the commit (a view, a TestCase).
        connection = connection_in_transaction(self.database)
        try:
            with self._schema_told_for_django():
                job = self.app.get(int(text), connection=connection)
        except JobNotFoundError as error:
            raise TaskResultDoesNotExist(str(error)) from error
        # As it was sent (its backend: refresh() comes back here).
        return result_of(job, self.alias, task_as_sent(job, self.alias))

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    @contextlib.contextmanager
    def _schema_told_for_django(self) -> Iterator[None]:
        """A database without due's tables, told as a Django project makes them."""
        try:
            yield
        except NotMigratedError as error:
            found = str(error).split(";")[0]  # what is wrong; due's own advice after it
            raise NotMigratedError(
                f"{found}; run `python manage.py migrate`, which creates (or upgrades) "
                f"due's tables for TASKS[{self.alias!r}]"
            ) from error


when_made(configure)

APP = "due.contrib.django"


def require_the_app(alias: str) -> None:
    """Refuse a due backend without due's app: without it, `manage.py migrate`
    makes no tables for the jobs, and workers know no task."""
    if apps.apps_ready:
        installed = apps.is_installed(APP)
    else:  # (a backend made while the apps load: their names as the settings give them)
        installed = any(
            entry == APP or entry.startswith(f"{APP}.") for entry in settings.INSTALLED_APPS
        )
    if not installed:
        raise ImproperlyConfigured(
            f'due: TASKS[{alias!r}] uses due.contrib.django.DueBackend, but "{APP}" is not '
            f"in INSTALLED_APPS: add it, then run `python manage.py migrate` (which "
            "creates due's tables)"
        )


def _aware(moment: datetime | None) -> datetime | None:
    """`run_after` as due takes it: aware (a naive one, with USE_TZ off, is in
    Django's current time zone)."""
    if moment is None or timezone.is_aware(moment):
        return moment
    aware: datetime = timezone.make_aware(moment)
    return aware
