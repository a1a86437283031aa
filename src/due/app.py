"""The facade: configure, register tasks, enqueue, inspect and control jobs.

No loops live here: workers, schedulers and the dashboard are separate
modules that take an App.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

from due import job_filters, lookups
from due.clock import Clock, SystemClock
from due.core.jobs import Job, JobState
from due.core.limits import Limit, LimitOverview
from due.core.limits import build as build_limit
from due.core.records import Action, BatchRequest, JobFilter, NewJob, QueueOverview
from due.core.schedules import (
    DEFAULT_ALERT_AFTER_SECONDS,
    DEFAULT_CATCH_UP_LIMIT,
    DEFAULT_MISFIRE,
    DEFAULT_MISFIRE_GRACE_SECONDS,
    DEFAULT_OVERLAP,
    Misfire,
    Overlap,
    Schedule,
    ScheduleOverview,
    ScheduleRun,
    SyncReport,
)
from due.durations import DurationLike, to_seconds
from due.errors import ConfigurationError, JobNotFoundError, ScheduleNotFoundError
from due.job_filters import Moment
from due.limits import LimitCatalog, LimitsOption
from due.long_work.context import Context
from due.long_work.pieces import Item, check_policy, completion_spec, piece_jobs
from due.payload import DEFAULT_MAX_PAYLOAD_BYTES
from due.redaction import redact_url
from due.request import (
    EnqueueOptions,
    JobRequest,
    PreparedOnRead,
    arguments_of,
    prepare,
    validate_queue,
)
from due.retry import Retry
from due.scheduler.catalog import ScheduleCatalog
from due.scheduler.registration import ScheduleTiming, define_for_app
from due.shown_arguments import DEFAULT_REDACT, redact_names
from due.store import POSTGRES_PREFIXES, Store, bulk, open_store
from due.store.bulk import DEFAULT_BATCH_SIZE
from due.store.sqlalchemy_connections import is_sqlalchemy
from due.task import DEFAULT_QUEUE, Registry, Task, TaskConfig, did_you_mean
from due.visibility import snapshot
from due.visibility.alerts import Alert, AlertRules, QueueThresholds, evaluate
from due.visibility.schedule_health import ExpectedRun, expected_runs
from due.visibility.snapshot import DEFAULT_FAILURES_WINDOW
from due.waiter import JobWaiter
from due.workflow_waiting import wait_ended
from due.workflows import (
    Step,
    StuckWorkflow,
    Workflow,
    WorkflowHandle,
    WorkflowStatus,
    WorkflowSummary,
    status_from,
    summary_from,
)

URL_ENVIRONMENT_VARIABLE = "DUE_DATABASE_URL"
BATCH_TASK = "due.batch"
"""The task name of a parent made by app.batch (it never runs itself)."""
DEFAULT_URL = "sqlite:///due.db"

P = ParamSpec("P")
R = TypeVar("R")


class TaskDecorator(Protocol):
    """What `@app.task(...)` with options returns: it registers the function."""

    @overload
    def __call__(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


def resolve_url(url: str | None) -> str:
    """The URL given, else $DUE_DATABASE_URL, else ./due.db (SQLite).

    Raises:
        ConfigurationError: The URL is not a string.
    """
    resolved = url or os.environ.get(URL_ENVIRONMENT_VARIABLE) or DEFAULT_URL
    if not isinstance(resolved, str):
        raise ConfigurationError(f"database URL must be a string, got {resolved!r}")
    return resolved


class App:
    """One application's tasks and the database its jobs live in.

    ::

        app = due.App()                          # ./due.db, or $DUE_DATABASE_URL
        app = due.App("postgresql://localhost/app")

    The URL is checked at once; the database is opened on first use. Through a
    transaction-mode pooler (PgBouncer's `pool_mode = transaction`), say so:
    `pooler="transaction"` (or `?due_pooler=transaction` in the URL), and give
    `listen_url=` (or $DUE_LISTEN_URL) a direct URL for wake-ups, else idle
    workers poll every 0.25 s.

    Every method that reads or writes the database may also raise
    `StoreError` (`StoreUnavailableError` when it cannot be reached) and, on
    first use, `NotMigratedError` or `SchemaTooNewError`. Close an app when
    done (`app.close()`, or `with due.App(...) as app:`).

    Args:
        url: `sqlite:///relative/path.db`, `sqlite:////absolute/path.db` or
            `postgresql://user:password@host:5432/dbname?...` (default:
            $DUE_DATABASE_URL, else `sqlite:///due.db`).
        clock: Where the time comes from (default: the database's clock; a
            `FakeClock` in tests).
        max_payload_bytes: The largest JSON text of a job's arguments (1 MiB).
        store_options: For PostgreSQL, `{"pool_size": 10, "connect_timeout": 5}`.
        pooler: `"transaction"` behind a transaction-mode pooler (PostgreSQL only).
        listen_url: A direct URL for `LISTEN` past that pooler (PostgreSQL only).
        redact: Names of arguments (and of keys in dict arguments) whose
            values due shows as "•••" for every task, beside each task's own
            `redact=` and the defaults (`due.DEFAULT_REDACT`).
        redact_defaults: False to show the values of the default names
            (`password`, `secret`, `token`, `api_key`, `authorization`) in
            what this app shows, and in the jobs it enqueues.

    Raises:
        ConfigurationError: The URL cannot be used (an unknown scheme, a bad
            path, a pooler option for SQLite, psycopg not installed for
            PostgreSQL), or `max_payload_bytes` is not a positive whole number.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        clock: Clock | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        store_options: dict[str, Any] | None = None,
        pooler: str | None = None,
        listen_url: str | None = None,
        redact: Iterable[str] | None = None,
        redact_defaults: bool = True,
    ) -> None:
        self.url = resolve_url(url)
        """The database URL, with its password (`repr(app)` hides it)."""
        self.clock: Clock = clock or SystemClock()
        """Where the app takes the time from."""
        if not isinstance(max_payload_bytes, int) or max_payload_bytes <= 0:
            raise ConfigurationError(
                f"max_payload_bytes must be a positive number of bytes, got {max_payload_bytes!r}"
            )
        self.max_payload_bytes = max_payload_bytes
        """The largest JSON text of a job's arguments, in bytes."""
        if not isinstance(redact_defaults, bool):
            raise ConfigurationError(
                f"redact_defaults= takes True or False, got {redact_defaults!r}"
            )
        self.redact: frozenset[str] = redact_names(redact, "App") | (
            DEFAULT_REDACT if redact_defaults else frozenset()
        )
        """The names every task's arguments are shown without (`due.DEFAULT_REDACT`
        too, unless `redact_defaults=False`), lower-case."""
        self.tasks = Registry()
        """The registered tasks, by name."""
        self._schedules = ScheduleCatalog(store=lambda: self.store)
        self.limits = LimitCatalog()
        self._limits_written = False
        """The limits declared with `app.limit(...)`, by name."""
        self.queue_thresholds: dict[str, QueueThresholds] = {}
        """Alert thresholds declared with `app.queue(...)`, by queue."""
        self._store_options = dict(store_options or {})
        for name, value in (("pooler", pooler), ("listen_url", listen_url)):
            if value is not None:
                if not self.url.startswith(POSTGRES_PREFIXES):
                    raise ConfigurationError(
                        f"{name}= is for PostgreSQL (a connection pooler in front of it); "
                        f"{self.url.split(':')[0]} has none"
                    )
                self._store_options[name] = value
        self._store: Store | None = None
        self._schema_checked = False
        self._lock = threading.Lock()
        self._waiter = JobWaiter(lambda: self.store)
        # Fail on a bad URL now, not at the first enqueue in production.
        self._validate_url()
        if self.url.startswith(POSTGRES_PREFIXES):
            self._pooler_options(pooler, listen_url)

    def _validate_url(self) -> None:
        from due.store import POSTGRES_PREFIXES, SQLITE_PREFIX, require_postgres_driver

        if not self.url.startswith((SQLITE_PREFIX, *POSTGRES_PREFIXES)):
            open_store(self.url, self.clock)  # raises the explanatory error
        if self.url.startswith(POSTGRES_PREFIXES):
            require_postgres_driver()
        if self.url.startswith(SQLITE_PREFIX):
            from due.store.sqlite.backend import path_from_url

            path_from_url(self.url)

    def _pooler_options(self, pooler: str | None, listen_url: str | None) -> None:
        """Check the pooler settings now.

        $DUE_LISTEN_URL counts only behind a transaction-mode pooler (it is
        ignored for a direct connection).
        """
        from due.store.postgres.pooler import PoolerSettings

        settings = PoolerSettings.from_url(self.url, pooler, listen_url)
        environment = os.environ.get("DUE_LISTEN_URL")
        if settings.transaction_pooler and listen_url is None and environment:
            PoolerSettings.from_url(self.url, pooler, environment)
            self._store_options["listen_url"] = environment

    def __repr__(self) -> str:
        return f"<due.App {redact_url(self.url)} tasks={len(self.tasks)}>"

    # --- the store ----------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store (due's own layer over the database), opened on first use.

        Raises:
            NotMigratedError: The database has no schema yet: run `app.migrate()`.
            SchemaTooNewError: A newer version of `due` migrated it.
            StoreUnavailableError: The database cannot be reached.
        """
        return self._checked_store()

    def open(self) -> None:
        """Open the database connections and check the schema now, not on first use.

        A web app's start-up (a FastAPI lifespan) then fails on a database it
        cannot use, rather than its first request. `close` closes them.

        Raises:
            NotMigratedError: The database has no schema yet: run `app.migrate()`.
            SchemaTooNewError: A newer version of `due` migrated it.
            StoreUnavailableError: The database cannot be reached.
        """
        self._checked_store()

    def _checked_store(self) -> Store:
        store = self._open_store()
        if not self._schema_checked:
            store.check_schema()
            self._schema_checked = True
        return store

    def _open_store(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.url, self.clock, **self._store_options)
            return self._store

    def migrate(self) -> list[int]:
        """Create or upgrade the schema (creating a SQLite file that does not exist).

        Safe to run again: an up-to-date schema is left as it is.

        Returns:
            The versions of the migrations applied (empty when up to date).

        Raises:
            SchemaTooNewError: A newer version of `due` migrated the database.
            StoreError: The database failed, or cannot be reached.
        """
        applied = self._open_store().migrate()
        self._schema_checked = False
        return applied

    def close(self) -> None:
        """Close the database connections (the app opens them again if used)."""
        self._waiter.close()
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
                self._schema_checked = False

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- tasks ----------------------------------------------------------------

    @overload
    def task(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        retry: Retry | None = None,
        timeout: DurationLike | None = None,
        lease: DurationLike | None = None,
        unique_for: DurationLike | None = None,
        stuck_after: DurationLike | None = None,
        check: Callable[[Any], str | None] | None = None,
        limits: LimitsOption | None = None,
        redact: Iterable[str] | None = None,
    ) -> TaskDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        retry: Retry | None = None,
        timeout: DurationLike | None = None,
        lease: DurationLike | None = None,
        unique_for: DurationLike | None = None,
        stuck_after: DurationLike | None = None,
        check: Callable[[Any], str | None] | None = None,
        limits: LimitsOption | None = None,
        redact: Iterable[str] | None = None,
    ) -> Task[Any, Any] | TaskDecorator:
        """Register a sync or async function as a task (`@app.task` or `@app.task(...)`).

        A handler that takes the job's `due.Context` declares it first; its
        task is typed without it: `Task[P, R]` where P are the other parameters::

            @app.task(queue="emails", retry=due.Retry(max_attempts=5))
            def send_reset_email(user_id: int) -> None: ...

        Durations are written "90s", "15m", "1h30m", as a number of seconds or
        as a timedelta.

        Args:
            fn: The function, when used as `@app.task` without parentheses.
            name: The stored task name (default: `module.qualname`).
            queue: The queue its jobs go to (default: `"default"`).
            priority: Higher runs first within a queue (default: 0).
            retry: How failures are retried (default: `due.Retry()`, 20
                attempts).
            timeout: An attempt running longer fails (and is retried per
                `retry`); default none.
            lease: How long a worker holds a job between heartbeats, at least
                2 s (default: the worker's, 10 s).
            unique_for: How long a job's key keeps deduplicating after success
                (default: until the job ends).
            stuck_after: A running job whose progress has not moved for this
                long is flagged stuck (default: never).
            check: Looks at each successful result and returns a problem text,
                or None when it is fine (`check=lambda r: "empty report" if not
                r["rows"] else None`): such a job ends `succeeded` with the
                warning kept, and is counted, shown and alerted as `warned`.
            limits: The limits its jobs count against, declared first with
                `app.limit`: names (`["stripe"]`: the whole limit each), or a
                mapping of name to a key function of the task's arguments,
                called as the task would be (`{"account-sync": lambda
                account_id: str(account_id)}`: the limit applies per key).
            redact: Names of its parameters, and of keys in its dict arguments
                at any depth, whose values due shows as "•••" (`due show`,
                `--json`, the dashboard, error messages); matched exactly,
                ignoring case. The app's `redact=` and the defaults
                (`due.DEFAULT_REDACT`) apply too. The handler gets the values.

        Returns:
            The task (or, with options, a decorator that returns it).

        Raises:
            ConfigurationError: An option is invalid, the name is another
                function's, or the `due.Context` parameter is not first.
        """

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(function):
                raise ConfigurationError(f"@app.task decorates a function, got {function!r}")
            task_name = name or f"{function.__module__}.{function.__qualname__}"
            config = TaskConfig.build(
                task=task_name,
                queue=queue,
                priority=priority,
                retry=retry,
                timeout=timeout,
                lease=lease,
                unique_for=unique_for,
                stuck_after=stuck_after,
                check=check,
                redact=redact,
            )
            if limits is not None:
                config = dataclasses.replace(config, limits=self.limits.uses(task_name, limits))
            task: Task[Any, Any] = Task(self, function, task_name, config)
            self.tasks.add(task)
            return task

        return register(fn) if fn is not None else register

    # --- enqueue --------------------------------------------------------------

    def enqueue(
        self,
        task: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        delay: DurationLike | None = None,
        run_at: datetime | None = None,
        queue: str | None = None,
        priority: int | None = None,
        key: str | None = None,
        unique_for: DurationLike | None = None,
        limit_keys: dict[str, str] | None = None,
        connection: Any = None,
    ) -> Job:
        """Enqueue by task name, for callers that do not import the function.

        Untyped: `task.enqueue(...)` is checked by type checkers, this is not.

        Args:
            task: The task's name.
            args: Its positional arguments.
            kwargs: Its keyword arguments.
            delay: Due after this long (at most 100 years).
            run_at: Due at this aware datetime (not with `delay`).
            queue: Instead of the task's queue.
            priority: Instead of the task's priority.
            key: Deduplicate: while a job with this key is queued, running or
                waiting, enqueue returns it.
            unique_for: With `key`, how long the key keeps deduplicating after
                success, instead of the task's.
            limit_keys: The key of a limit of the task, by the limit's name,
                instead of its key function's.
            connection: Your own open connection (psycopg's or sqlite3's, or
                SQLAlchemy's Connection or Session): the job is written in your
                transaction.

        Returns:
            The job as stored (or the active job with the same key).

        Raises:
            UnknownTaskError: No task of this app has that name.
            ArgumentsError: The arguments do not fit the task's function.
            PayloadError: The arguments cannot be stored as JSON, or are too large.
            InvalidJobError: An option is invalid.
        """
        positional, keywords = arguments_of(task, args, kwargs, self.redact)
        options = EnqueueOptions(
            delay=delay,
            run_at=run_at,
            queue=queue,
            priority=priority,
            key=key,
            unique_for=unique_for,
            limit_keys=limit_keys,
        )
        request = JobRequest(task, positional, keywords, **options.options())
        return self.enqueue_many([request], connection=connection)[0]

    def enqueue_many(self, requests: Iterable[JobRequest], *, connection: Any = None) -> list[Job]:
        """Enqueue many jobs in one transaction (multi-row inserts); all or none.

        Args:
            requests: Jobs made by `task.request(...)` or
                `task.options(...).request(...)`.
            connection: Your own open connection (psycopg's or sqlite3's, or
                SQLAlchemy's Connection or Session): the jobs are written in
                your transaction (in a savepoint: one refused leaves none of
                them, and your transaction goes on).

        Returns:
            The jobs as stored, in the order of the requests.

        Raises:
            UnknownTaskError: A request names no task of this app.
            ArgumentsError: A request's arguments do not fit its task.
            PayloadError: A request's arguments cannot be stored.
            InvalidJobError: A request's option is invalid.
            ConfigurationError: Something other than a request was given.
        """
        if connection is not None:
            # Before the store is looked at; the limits written first, unless
            # that would wait for the caller's own write lock (SQLite).
            prepared = self._prepare(requests, limits=self._may_write_beside(connection))
            return self.store.job_enqueue(prepared, connection=connection)
        jobs = self._prepare_as_sent(requests)
        return self.store.job_enqueue(jobs)

    async def aenqueue_many(
        self, requests: Iterable[JobRequest], *, connection: Any = None
    ) -> list[Job]:
        """`enqueue_many` for async code, on your AsyncConnection if given.

        Args:
            requests: Jobs made by `task.request(...)`.
            connection: Your own open async connection (psycopg's
                AsyncConnection, or SQLAlchemy's AsyncConnection or AsyncSession),
                to write the jobs in your transaction.

        Returns:
            The jobs as stored, in the order of the requests.

        Raises:
            InvalidJobError: A request is refused (as by `enqueue_many`).
            ConfigurationError: Something other than a request was given.
        """
        # Every request checked and encoded now, on the loop: once this awaits,
        # other coroutines may change the arguments' objects.
        limits = connection is None or self._may_write_beside(connection)
        if limits and self.limits and not self._limits_written:  # (off the loop: a transaction)
            await asyncio.to_thread(self._limits_known)
        jobs = self._prepare(requests, limits=limits)
        store = self.store
        if connection is not None:
            return await store.job_enqueue_async(jobs, connection)
        created = await store.job_enqueue_on_loop(jobs)  # one job: grouped with the loop's others
        if created is not None:
            return created
        return await asyncio.to_thread(store.job_enqueue, jobs)

    def _prepare(self, requests: Iterable[JobRequest], *, limits: bool = True) -> list[NewJob]:
        return list(map(self._preparer(limits=limits), requests))

    def _may_write_beside(self, connection: Any) -> bool:
        """Whether the app may write on its own connection beside the caller's.

        Not on SQLite once the caller's transaction may hold the file's one
        write lock (the app would wait for its own caller). Its limits are then
        written by the workers, as they start, or by its next enqueue without a
        connection.
        """
        if not self._open_store().single_writer:
            return True
        # A SQLAlchemy connection or session may hold the write lock whatever
        # its in_transaction() says (a savepoint, a session about to flush).
        return not (is_sqlalchemy(connection) or getattr(connection, "in_transaction", False))

    def _prepare_as_sent(self, requests: Iterable[JobRequest]) -> Sequence[NewJob]:
        """Requests made ready for the store's own transaction.

        Many requests on PostgreSQL are prepared as their rows are sent
        (PreparedOnRead), so a bad one deep in the batch is met after the store
        is reached. One request, or on SQLite, whose one writer would wait while
        they are prepared: all first, before the store is looked at (its schema
        is checked on first use).
        """
        requests = list(requests)
        if len(requests) == 1 or self._open_store().single_writer:
            return self._prepare(requests)
        return PreparedOnRead(requests, self._preparer())

    def _preparer(self, *, limits: bool = True) -> Callable[[JobRequest], NewJob]:
        """A request, validated and made ready to insert.

        Its task is looked up once for a run of requests of one task. Every
        way of enqueueing (jobs, a workflow's steps) prepares its requests
        here: the app's limits are written first, once (`_limits_known`).
        """
        if limits:
            self._limits_known()
        task: Task[Any, Any] | None = None

        def prepared(request: JobRequest) -> NewJob:
            nonlocal task
            if not isinstance(request, JobRequest):
                raise ConfigurationError(
                    f"enqueue_many takes requests made by task.request(...), got {request!r}"
                )
            if task is None or task.name != request.task:
                task = self.tasks.get(request.task)
            return prepare(request, task, self.max_payload_bytes)

        return prepared

    # --- inspect and control ------------------------------------------------------

    def get(self, job_id: int, *, connection: Any = None) -> Job:
        """The job as stored now: state, attempts, times, errors, result.

        Args:
            job_id: The job's id.
            connection: Your own open connection (as for `enqueue`): the job
                as your transaction sees it (one you enqueued in it and have
                not committed yet included).

        Returns:
            The job.

        Raises:
            JobNotFoundError: No job has that id (or it was pruned).
            ConfigurationError: The id is not a whole number.
        """
        return self.store.job_get(lookups.job_id(job_id), connection)

    def jobs(
        self,
        *,
        queue: str | None = None,
        state: JobState | str | None = None,
        task: str | None = None,
        parent: int | None = None,
        stuck: bool = False,
        key: str | None = None,
        before: int | None = None,
        limit: int = 100,
        since: Moment | None = None,
        until: Moment | None = None,
        error_contains: str | None = None,
        key_prefix: str | None = None,
        workflow: int | None = None,
        args_contains: Mapping[str, Any] | str | None = None,
    ) -> list[Job]:
        """Jobs, newest first; delayed jobs are `queued` with a future `run_at`.

        Args:
            queue: Only this queue's.
            state: Only jobs in this state (a `JobState` or its name).
            task: Only this task's.
            parent: Only the pieces of this parent job.
            stuck: Only running jobs whose progress has not moved for their
                task's `stuck_after`.
            key: Only the jobs enqueued with this key.
            before: Only jobs with a smaller id (the next page after the last id
                seen).
            limit: At most this many (0 or more).
            since: Only jobs whose time is this or later: the time a job ended
                if it has, else the time it was created. An aware datetime,
                ISO 8601 text with its offset, or a duration before now ("30m").
            until: Only jobs whose time (as for `since`) is before this.
            error_contains: Only jobs whose last error contains this text.
            key_prefix: Only jobs whose key starts with this text.
            workflow: Only the steps of this workflow.
            args_contains: Only jobs whose arguments hold this JSON object (a
                dict, or its JSON text): their keyword arguments, or one
                positional argument that is an object. On PostgreSQL, JSON
                containment (`@>`: nested objects may hold more); on SQLite,
                each key with an equal value (nested values equal as a whole).
                No index serves it: on a big table, give a `state` too
                (failed, running and waiting jobs have an index of their own).
                It may not name a redacted key (`redact=`, the defaults): the
                task's, or without `task`, any task's; and it never looks
                inside a positional argument shown hidden.

        Returns:
            The jobs, newest first.

        Raises:
            ConfigurationError: An unknown state, a limit or id that is not a
                whole number, a `since`/`until` that is neither a time nor
                a duration, or an `args_contains` that names a redacted key
                (a search by it would confirm a guessed secret).
        """
        where = self._job_filter(
            queue=queue,
            state=_state(state),
            task=task,
            parent=parent,
            stuck=stuck,
            key=key,
            before=before,
            limit=limit,
            since=since,
            until=until,
            error_contains=error_contains,
            key_prefix=key_prefix,
            workflow=workflow,
            args_contains=args_contains,
        )
        if not job_filters.can_match(where):
            return []
        return self.store.job_list(where)

    def _job_filter(self, **options: Any) -> JobFilter:
        where = job_filters.build(self.store.now, **options)
        key = job_filters.hidden_key(where, self.redacted_names(where.task))
        if key is not None:
            raise ConfigurationError(
                f"args_contains cannot search by {key!r}: {self._who_hides(key)} redacts it, "
                "and a search by its value would confirm a guessed secret to whoever "
                "may search; search by another argument"
            )
        if where.args_contains is None:
            return where
        # Nor inside an argument this app shows hidden whole (a job enqueued
        # before its task had redact= stored no position of its own).
        hidden = {task.name: task.redacted_positions for task in self.tasks}
        return job_filters.hiding(where, hidden)

    def wait(self, job_id: int, *, timeout: DurationLike | None = None) -> Job:
        """Block until the job has ended (succeeded, failed or cancelled).

        Woken by the job's end (a notification on PostgreSQL, a commit on
        SQLite), not by polling. A job that fails and is retried has not ended:
        this waits for its last attempt.

        Args:
            job_id: The job's id.
            timeout: How long to wait at most ("90s", seconds, a timedelta);
                None waits for as long as it takes.

        Returns:
            The job as it ended.

        Raises:
            TimeoutError: It has not ended within `timeout` (the message names
                its state).
            JobNotFoundError: No job has that id.
        """
        return self._waiter.wait(lookups.job_id(job_id), _timeout(timeout))

    async def await_job(self, job_id: int, *, timeout: DurationLike | None = None) -> Job:
        """`wait` for async code: the event loop runs on while it waits.

        Args:
            job_id: The job's id.
            timeout: How long to wait at most; None waits for as long as it takes.

        Returns:
            The job as it ended.

        Raises:
            TimeoutError: It has not ended within `timeout`.
            JobNotFoundError: No job has that id.
        """
        return await self._waiter.await_job(lookups.job_id(job_id), _timeout(timeout))

    def cancel(self, job_id: int, *, by: str | None = None) -> Job:
        """Cancel a job.

        Queued or delayed: it will not run. Running: it is asked to stop and
        ends `cancelled` at its next safe point (not retried). A waiting
        parent: it ends, and so do its unfinished pieces.

        Args:
            job_id: The job's id.
            by: Who did it, recorded in the history of actions (`history`), as
                the dashboard does; here and in every other action.

        Returns:
            The job as it stands now (a running job is still `running`, with
            `cancel_requested`).

        Raises:
            JobNotFoundError: No job has that id.
            InvalidStateError: The job has already ended.
        """
        job = self.store.job_cancel(lookups.job_id(job_id))
        self._note("cancel", by, job_id=job.id)
        return job

    def retry(self, job_id: int, *, now: bool = False, by: str | None = None) -> Job:
        """Put a failed or cancelled job back in its queue, with a fresh set of attempts.

        It is due at once, unless it was cancelled while delayed to a time still
        to come: then it keeps that time (it is put back as it was), unless `now`.

        Args:
            job_id: The job's id.
            now: Due at once even if it was delayed to a time still to come.
            by: Who did it (see `cancel`).

        A step of a workflow is retried with its workflow (`retry_workflow`):
        its failed and cancelled steps run again, each after those it comes after.

        Returns:
            The job, queued again (or waiting, for a step after a retried step).

        Raises:
            JobNotFoundError: No job has that id.
            InvalidStateError: It is not failed or cancelled, or it is a parent
                of pieces, or a piece whose parent has settled.
        """
        job = self.store.job_retry(lookups.job_id(job_id), run_now=bool(now))
        self._note("retry", by, job_id=job.id)
        return job

    def retry_many(
        self,
        *,
        task: str | None = None,
        queue: str | None = None,
        state: JobState | str | None = JobState.FAILED,
        since: Moment | None = None,
        until: Moment | None = None,
        error_contains: str | None = None,
        key_prefix: str | None = None,
        parent: int | None = None,
        workflow: int | None = None,
        args_contains: Mapping[str, Any] | str | None = None,
        now: bool = False,
        by: str | None = None,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_batch: Callable[[int], None] | None = None,
        cap: int | None = None,
    ) -> int:
        """Retry every job the filter matches (as `jobs` lists them), in batches.

        Each job is retried as `retry` would (a job it refuses is passed over);
        a step of a workflow is retried with its workflow, as `retry_workflow`
        does (its failed and cancelled steps run again, counted too).
        A retried job no longer matches, so a run cut off half way is finished
        by running it again, which retries none twice. Recorded as one action
        (`history`), with the filter and the count, when `by` is given.

        Args:
            task: Only this task's.
            queue: Only this queue's.
            state: `failed` (the default) or `cancelled`; None for both.
            since: Only jobs that ended at this time or later (see `jobs`).
            until: Only jobs that ended before this time.
            error_contains: Only jobs whose last error contains this text.
            key_prefix: Only jobs whose key starts with this text.
            parent: Only the pieces of this parent job.
            workflow: Only the steps of this workflow.
            args_contains: Only jobs whose arguments hold this JSON object (a
                dict, or its JSON text): their keyword arguments, or one
                positional argument that is an object (see `jobs`).
            now: Due at once even if delayed to a time still to come (see `retry`).
            by: Who did it, recorded in the history of actions.
            dry_run: Only count the jobs it would retry: in the database, one
                statement, no job read (`on_batch` is called once, with the count).
            batch_size: Jobs per transaction.
            on_batch: Called after each batch with the count retried so far.
            cap: With `dry_run`, count no further than this many: a count
                equal to `cap` means that many or more (the dashboard's
                "Retry all 10,000+").

        Returns:
            How many jobs were retried (with `dry_run`: would be).

        Raises:
            ConfigurationError: A state other than failed or cancelled, or a
                filter that cannot be read (as for `jobs`).
        """
        where = self._bulk_filter(
            "retry",
            bulk.RETRYABLE,
            task=task,
            queue=queue,
            state=state,
            since=since,
            until=until,
            error_contains=error_contains,
            key_prefix=key_prefix,
            parent=parent,
            workflow=workflow,
            args_contains=args_contains,
            batch_size=batch_size,
        )
        return self._bulk(
            "retry",
            where,
            by,
            dry_run,
            cap,
            lambda count: self.store.job_retry_many(
                where, bool(now), batch_size=batch_size, on_batch=count
            ),
            on_batch,
        )

    def cancel_many(
        self,
        *,
        task: str | None = None,
        queue: str | None = None,
        state: JobState | str | None = None,
        since: Moment | None = None,
        until: Moment | None = None,
        error_contains: str | None = None,
        key_prefix: str | None = None,
        parent: int | None = None,
        workflow: int | None = None,
        args_contains: Mapping[str, Any] | str | None = None,
        by: str | None = None,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_batch: Callable[[int], None] | None = None,
        cap: int | None = None,
    ) -> int:
        """Cancel every job the filter matches (as `jobs` lists them), in batches.

        Each job is cancelled as `cancel` would: queued and waiting ones end
        now, running ones are asked to stop (and passed over by a later
        `cancel_many`: they are asked already). A cancelled job no longer
        matches, so a run cut off half way is finished by running it again.
        Recorded as one action (`history`), with the filter and the count,
        when `by` is given.

        Args:
            task: Only this task's.
            queue: Only this queue's.
            state: `queued`, `running` or `waiting`; None (the default) for all three.
            since: Only jobs created at this time or later (see `jobs`).
            until: Only jobs created before this time.
            error_contains: Only jobs whose last error contains this text.
            key_prefix: Only jobs whose key starts with this text.
            parent: Only the pieces of this parent job.
            workflow: Only the steps of this workflow.
            args_contains: Only jobs whose arguments hold this JSON object (a
                dict, or its JSON text): their keyword arguments, or one
                positional argument that is an object (see `jobs`).
            by: Who did it, recorded in the history of actions.
            dry_run: Only count the jobs it would cancel: in the database, one
                statement, no job read (`on_batch` is called once, with the count).
            batch_size: Jobs per transaction.
            on_batch: Called after each batch with the count cancelled so far.
            cap: With `dry_run`, count no further than this many: a count
                equal to `cap` means that many or more (the dashboard's
                "Cancel all 10,000+").

        Returns:
            How many jobs were cancelled or asked to stop (with `dry_run`: would be).

        Raises:
            ConfigurationError: A state that has ended, or a filter that cannot
                be read (as for `jobs`).
        """
        where = self._bulk_filter(
            "cancel",
            bulk.CANCELLABLE,
            task=task,
            queue=queue,
            state=state,
            since=since,
            until=until,
            error_contains=error_contains,
            key_prefix=key_prefix,
            parent=parent,
            workflow=workflow,
            args_contains=args_contains,
            batch_size=batch_size,
        )
        return self._bulk(
            "cancel",
            where,
            by,
            dry_run,
            cap,
            lambda count: self.store.job_cancel_many(where, batch_size=batch_size, on_batch=count),
            on_batch,
        )

    def _bulk_filter(
        self,
        action: str,
        allowed: Sequence[JobState],
        *,
        state: JobState | str | None,
        batch_size: int,
        **options: Any,
    ) -> JobFilter:
        chosen = _state(state)
        if chosen is not None and chosen not in allowed:
            names = " or ".join(s.value for s in allowed)
            raise ConfigurationError(
                f"cannot {action} {chosen.value} jobs: give state={names} (or None for all)"
            )
        if lookups.list_limit(batch_size, "batch_size") < 1:
            raise ConfigurationError("batch_size must be 1 or more")
        return self._job_filter(state=chosen, **options)

    def _bulk(
        self,
        action: str,
        where: JobFilter,
        by: str | None,
        dry_run: bool,
        cap: int | None,
        run: Callable[[Callable[[int], None]], int],
        on_batch: Callable[[int], None] | None,
    ) -> int:
        if cap is not None and not dry_run:
            raise ConfigurationError("cap limits a count: give it with dry_run=True")
        if cap is not None:
            cap = lookups.list_limit(cap, "cap")  # a whole number; past 64 bits: all
            if cap < 1:
                raise ConfigurationError("cap must be 1 or more")
        if not job_filters.can_match(where):
            return 0
        if dry_run:
            counted = self.store.job_count_many(action, where, cap)
            if on_batch is not None:
                on_batch(counted)
            return counted
        done = [0]

        def count(acted: int) -> None:
            done[0] = acted
            if on_batch is not None:
                on_batch(acted)

        try:
            done[0] = run(count)
        finally:
            # Also when cut off: the batches committed are recorded.
            shown = job_filters.describe(where, hide=self.redacted_names(where.task))
            self._note(f"{action} {done[0]} jobs where {shown}", by, queue=where.queue)
        return done[0]

    def history(
        self,
        *,
        job: int | None = None,
        schedule: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[Action]:
        """What was done by hand (given `by=`) to a job, a schedule or a queue.

        Args:
            job: Only actions on this job.
            schedule: Only actions on this schedule.
            queue: Only actions on this queue.
            limit: The latest this many (0 or more).

        Returns:
            The actions, oldest first.

        Raises:
            ConfigurationError: A limit or id that is not a whole number, or a
                negative limit.
        """
        return self.store.action_history(
            job_id=lookups.id_filter(job, "job"),
            schedule=schedule,
            queue=queue,
            limit=lookups.list_limit(limit),
        )

    def redacted_names(self, task: str | None = None) -> frozenset[str]:
        """The argument names (lower-case) due shows as `•••` for `task`'s jobs.

        A filter's `args_contains` may not search by them.

        Args:
            task: A task's name: its names, the app's included. None (or a
                task not registered here): every name any task of this app hides.

        Returns:
            The names, lower-case.
        """
        if task is not None and task in self.tasks.names():
            return self.tasks.get(task).redact
        return self.redact.union(*(each.redact for each in self.tasks))

    def _who_hides(self, name: str) -> str:
        """Whose `redact` a (redacted) name is in, for a message."""
        lowered = name.lower()
        if lowered in self.redact:
            return "due.DEFAULT_REDACT" if lowered in DEFAULT_REDACT else "App(redact=...)"
        tasks = sorted(each.name for each in self.tasks if lowered in each.redact)
        return f"@app.task(redact=...) of {', '.join(map(repr, tasks))}"

    def _note(self, action: str, by: str | None, **subject: Any) -> None:
        if by is not None:
            self.store.action_record(action, str(by), **subject)

    # --- pieces and pauses ----------------------------------------------------------

    # --- workflows -------------------------------------------------------------------

    def workflow(self, name: str) -> Workflow:
        """A new workflow: add its steps with `flow.add(...)`, then `flow.enqueue()`.

        Args:
            name: A name for people (an id is made at enqueue).

        Returns:
            The workflow to build.

        Raises:
            ConfigurationError: The name is not a non-empty string.
        """
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ConfigurationError(f"a workflow's name is a non-empty string, got {name!r}")
        return Workflow(self, name)

    def chain(self, *requests: JobRequest, name: str = "chain") -> WorkflowHandle:
        """Enqueue jobs that run one after the other.

        Each reads the one before's result at `ctx.upstream` (its steps are
        named "step-1", "step-2", ...).

        Args:
            *requests: The jobs, in order (`task.request(...)`).
            name: The workflow's name.

        Returns:
            The workflow's id and its steps' job ids.

        Raises:
            ConfigurationError: No request was given.
        """
        flow = self.workflow(name)
        previous: list[Step] = []
        for request in requests:
            previous = [flow.add(request, after=previous)]
        return flow.enqueue()

    def group(
        self, requests: Iterable[JobRequest], *, then: JobRequest, name: str = "group"
    ) -> WorkflowHandle:
        """Enqueue jobs that run side by side, and `then` once they have all ended.

        `then` reads their results at `ctx.upstream`, by step name.

        Args:
            requests: The jobs to run side by side.
            then: The job to run after them all.
            name: The workflow's name.

        Returns:
            The workflow's id and its steps' job ids (`then`'s step is "then").

        Raises:
            ConfigurationError: No request was given.
        """
        flow = self.workflow(name)
        members = [flow.add(request) for request in requests]
        flow.add(then, name="then", after=members)
        return flow.enqueue()

    def workflow_status(self, workflow_id: int) -> WorkflowStatus:
        """A workflow's state and its steps, as stored now.

        Args:
            workflow_id: The workflow's id (`handle.id`).

        Returns:
            Its state (running, succeeded, failed, cancelled) and its `steps`
            by name, each with `job_id`, `state` and the names it comes `after`.

        Raises:
            JobNotFoundError: No workflow has that id.
        """
        found = self.store.workflow_status(lookups.job_id(workflow_id))
        if found is None:
            raise JobNotFoundError(f"no workflow with id {workflow_id}")
        return status_from(*found)

    def workflows(self, limit: int = 50) -> list[WorkflowSummary]:
        """The most recent workflows, newest first, without their steps.

        Args:
            limit: How many at most.

        Returns:
            Each workflow's id, name, state, step counts and times.

        Raises:
            ConfigurationError: A limit that is not a whole number, or negative.
        """
        rows = self.store.workflow_recent(lookups.list_limit(limit))
        return [summary_from(row) for row in rows]

    def stuck_workflows(self, limit: int = 100) -> list[StuckWorkflow]:
        """Running workflows that cannot advance (it never happens: `due check` alerts).

        No step is queued or running, and a step waits whose upstream steps
        have all ended, or every step has ended though the workflow still
        says it runs; a step is released, and a workflow ends, in the
        transaction that ends its last upstream step, so only a graph or
        counts broken by hand look like this.

        Args:
            limit: How many at most.

        Returns:
            Each such workflow's id, name and the name of a step that waits
            (None when every step has ended).
        """
        rows = self.store.workflow_stuck(lookups.list_limit(limit))
        return [StuckWorkflow(int(row["id"]), row["name"], row["step"]) for row in rows]

    def cancel_workflow(self, workflow_id: int, *, by: str | None = None) -> WorkflowStatus:
        """Cancel every unfinished step of a workflow.

        Queued and waiting steps end now; running ones are asked to stop and
        end at their next safe point, as `cancel` does for one job.

        Args:
            workflow_id: The workflow's id.
            by: Who did it, recorded in the history of each step it cancelled.

        Returns:
            The workflow as stored now.

        Raises:
            JobNotFoundError: No workflow has that id.
        """
        found = self.store.workflow_cancel(lookups.job_id(workflow_id))
        if found is None:
            raise JobNotFoundError(f"no workflow with id {workflow_id}")
        for job in [*found[0], *found[1]]:
            self._note("cancel_workflow", by, job_id=job)
        return self.workflow_status(workflow_id)

    def retry_workflow(self, workflow_id: int, *, by: str | None = None) -> WorkflowStatus:
        """Run a workflow's failed and cancelled steps again, after a fix.

        Each gets a fresh set of attempts; a step whose upstream steps are run
        again waits for them; no step that succeeded runs again.

        Args:
            workflow_id: The workflow's id.
            by: Who did it, recorded in the history of each step it retried.

        Returns:
            The workflow as stored now (running again, unless nothing was to retry).

        Raises:
            JobNotFoundError: No workflow has that id.
        """
        retried = self.store.workflow_retry(lookups.job_id(workflow_id))
        if retried is None:
            raise JobNotFoundError(f"no workflow with id {workflow_id}")
        for job in retried:
            self._note("retry_workflow", by, job_id=job)
        return self.workflow_status(workflow_id)

    def wait_workflow(
        self, workflow_id: int, *, timeout: DurationLike | None = None
    ) -> WorkflowStatus:
        """Block until every step of the workflow has ended.

        Args:
            workflow_id: The workflow's id.
            timeout: How long to wait at most, in real seconds (whatever the
                app's clock); None waits for as long as it takes.

        Returns:
            The workflow as it ended.

        Raises:
            TimeoutError: It has not ended within `timeout` (the error names a
                step still to end).
            JobNotFoundError: No workflow has that id.
        """
        return wait_ended(
            lookups.job_id(workflow_id),
            lambda: self.workflow_status(workflow_id),
            self._waiter.wait,
            _timeout(timeout),
        )

    def batch(
        self,
        task: Task[Any, Any] | str,
        items: Iterable[tuple[Any, ...] | list[Any] | JobRequest],
        *,
        on_complete: Task[Any, Any] | str | None = None,
        on_piece_failure: str = "continue",
        name: str = BATCH_TASK,
    ) -> Job:
        """Pieces under a new parent job that waits for them (`ctx.spawn`, from outside a job).

        The parent shows `k of n` as its progress, and `on_complete` runs once
        when the last piece ends, with a summary `{"parent", "pieces",
        "succeeded", "failed"}`.

        Args:
            task: The pieces' task (or its name).
            items: One per piece: its positional arguments, or a
                `task.request(...)`.
            on_complete: A task (or its name) run once when the last piece ends.
            on_piece_failure: `"fail"` fails the parent at the first failed
                piece and cancels the rest; `"continue"` counts failures.
            name: The parent's task name, as listed (it never runs itself).

        Returns:
            The parent, `waiting`.

        Raises:
            InvalidJobError: An item does not fit the task (nothing is written).
            ConfigurationError: An unknown `on_piece_failure`.
        """
        check_policy(on_piece_failure)
        pieces = self.piece_jobs(task, items)
        spec = self.completion_spec(on_complete) if on_complete is not None else None
        parent = self.store.batch_create(BatchRequest(name, pieces, spec, on_piece_failure))
        return self.get(parent)

    def piece_jobs(self, task: Task[Any, Any] | str, items: Iterable[Item]) -> list[NewJob]:
        """Validated pieces of `task` (all refused if one is bad); used by `ctx.spawn`."""
        return piece_jobs(self.tasks, self._prepare, task, items)

    def completion_spec(self, task: Task[Any, Any] | str) -> str:
        """How a parent stores its completion task (checked against the summary)."""
        return completion_spec(self.tasks, task)

    def pause_queue(self, queue: str, *, force: bool = False, by: str | None = None) -> None:
        """Stop claiming the queue's jobs (running ones finish); durable until resumed.

        Args:
            queue: The queue's name.
            force: Pause even a queue that nothing uses yet.
            by: Who did it (see `cancel`).

        Raises:
            ConfigurationError: No task of this app, no job, worker or schedule
                uses the queue (a likely typo), unless `force`.
            InvalidJobError: The name is not a valid queue name.
        """
        name = self._known_queue(queue, force, "pause")
        self.store.queue_pause(name, True)
        self._note("pause", by, queue=name)

    def resume_queue(self, queue: str, *, force: bool = False, by: str | None = None) -> None:
        """Claim the queue's jobs again.

        Args:
            queue: The queue's name.
            force: Resume even a queue that nothing uses.
            by: Who did it (see `cancel`).

        Raises:
            ConfigurationError: Nothing uses the queue, unless `force`.
            InvalidJobError: The name is not a valid queue name.
        """
        name = self._known_queue(queue, force, "resume")
        self.store.queue_pause(name, False)
        self._note("resume", by, queue=name)

    def _known_queue(self, queue: str, force: bool, action: str) -> str:
        name = validate_queue(queue)
        if force or name in self.tasks.queues() or self.store.queue_in_use(name):
            return name
        close = did_you_mean(name, sorted({q.name for q in self.queues()}))
        hint = f"{close} " if close else ""
        raise ConfigurationError(
            f"no task, job, worker or schedule uses queue {name!r}; {hint}"
            f"check the name, or {action} it anyway with --force (force=True)"
        )

    def pause_group(self, parent_id: int, *, by: str | None = None) -> None:
        """Hold a parent's queued pieces (and those it spawns later) until resumed.

        Args:
            parent_id: The parent job's id.
            by: Who did it (see `cancel`).

        Raises:
            JobNotFoundError: No job has that id.
        """
        parent = lookups.job_id(parent_id)
        self.store.group_hold(parent, True)
        self._note("pause pieces", by, job_id=parent)

    def resume_group(self, parent_id: int, *, by: str | None = None) -> None:
        """Let a parent's held pieces start again.

        Args:
            parent_id: The parent job's id.
            by: Who did it (see `cancel`).

        Raises:
            JobNotFoundError: No job has that id.
        """
        parent = lookups.job_id(parent_id)
        self.store.group_hold(parent, False)
        self._note("resume pieces", by, job_id=parent)

    # --- schedules (scheduler/catalog.py) -------------------------------------------

    def schedule(
        self,
        name: str,
        cron: str | None = None,
        every: DurationLike | None = None,
        *,
        task: Task[Any, Any] | str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        tz: str = "UTC",
        misfire: Misfire | str = DEFAULT_MISFIRE,
        overlap: Overlap | str = DEFAULT_OVERLAP,
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
        misfire_grace: DurationLike = DEFAULT_MISFIRE_GRACE_SECONDS,
        queue: str | None = None,
        priority: int | None = None,
        enabled: bool = True,
        alert_after: DurationLike = DEFAULT_ALERT_AFTER_SECONDS,
    ) -> Schedule:
        """Define a recurring schedule in code; workers sync it to the database at start.

        Give either `cron` or `every`::

            app.schedule("nightly-report", cron="0 2 * * *", task=build_report,
                         tz="Europe/Paris")

        The module that defines it must be imported by the app's module, or a
        worker never sees it.

        Args:
            name: Its unique name (at most 200 characters).
            cron: A cron expression of 5 fields (or 6, seconds first), in `tz`.
            every: Or an interval ("15m", seconds, a timedelta).
            task: The task each run enqueues (or its name).
            args: The positional arguments of every run.
            kwargs: The keyword arguments of every run.
            tz: The time zone the cron expression is read in (an IANA name).
            misfire: What to do with times missed while nothing could fire
                them: `skip`, `catch_up` or `latest` (default).
            overlap: What to do when a time comes while the previous run has
                not ended: `allow`, `forbid` (default), `queue` or `replace`.
            catch_up_limit: With `catch_up`, the most missed times run (10).
            misfire_grace: A time this late still runs as on time (60 s).
            queue: Instead of the task's queue.
            priority: Instead of the task's priority.
            enabled: False defines it disabled (it does not fire).
            alert_after: `due check` (and the metrics' example rules) alert
                when a run has not started this long after its time, or when no
                run succeeded within the schedule's period plus this (default 5
                minutes).

        Returns:
            The validated definition.

        Raises:
            ConfigurationError: An invalid cron expression, time zone, interval
                or option; both or neither of `cron` and `every`; a name this app
                already defines.
            UnknownTaskError: `task` names no task of this app.
            InvalidJobError: The arguments do not fit the task, or an invalid
                queue or priority.
        """
        timing = ScheduleTiming(
            cron, every, tz, misfire, overlap, catch_up_limit, misfire_grace, alert_after
        )
        schedule = define_for_app(
            self.tasks,
            name,
            timing,
            task,
            args,
            kwargs,
            queue,
            priority,
            enabled,
            max_payload_bytes=self.max_payload_bytes,
            now=self.clock.wall(),
        )
        return self._schedules.define(schedule)

    def add_schedule(
        self,
        name: str,
        cron: str | None = None,
        every: DurationLike | None = None,
        *,
        task: Task[Any, Any] | str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        tz: str = "UTC",
        misfire: Misfire | str = DEFAULT_MISFIRE,
        overlap: Overlap | str = DEFAULT_OVERLAP,
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
        misfire_grace: DurationLike = DEFAULT_MISFIRE_GRACE_SECONDS,
        queue: str | None = None,
        priority: int | None = None,
        alert_after: DurationLike = DEFAULT_ALERT_AFTER_SECONDS,
    ) -> Schedule:
        """Store a schedule at run time (not in code); it fires from its next time on.

        Args:
            name: Its unique name (at most 200 characters).
            cron: A cron expression of 5 fields (or 6, seconds first), in `tz`.
            every: Or an interval ("15m", seconds, a timedelta).
            task: The task each run enqueues (or its name).
            args: The positional arguments of every run.
            kwargs: The keyword arguments of every run.
            tz: The time zone the cron expression is read in (an IANA name).
            misfire: What to do with times missed while nothing could fire
                them: `skip`, `catch_up` or `latest` (default).
            overlap: What to do when a time comes while the previous run has
                not ended: `allow`, `forbid` (default), `queue` or `replace`.
            catch_up_limit: With `catch_up`, the most missed times run (10).
            misfire_grace: A time this late still runs as on time (60 s).
            queue: Instead of the task's queue.
            priority: Instead of the task's priority.
            alert_after: See `schedule`.

        Returns:
            The validated definition, as stored.

        Raises:
            ConfigurationError: An invalid definition (see `schedule`), or a
                schedule of that name already exists.
            UnknownTaskError: `task` names no task of this app.
            InvalidJobError: The arguments do not fit the task.
        """
        timing = ScheduleTiming(
            cron, every, tz, misfire, overlap, catch_up_limit, misfire_grace, alert_after
        )
        schedule = define_for_app(
            *(self.tasks, name, timing, task, args, kwargs, queue, priority),
            max_payload_bytes=self.max_payload_bytes,
            now=self.clock.wall(),
        )
        return self._schedules.add(schedule)

    @property
    def defined_schedules(self) -> dict[str, Schedule]:
        """The schedules defined in code, by name."""
        return self._schedules.defined

    def sync_schedules(self) -> SyncReport:
        """Add this app's code-defined schedules to the database, and write those changed.

        Workers do it as they start. A sync disables none.

        Returns:
            What was added and changed, and the stored schedules this code does
            not define.
        """
        return self._schedules.sync()

    def prune_schedules(self, *, by: str | None = None) -> list[str]:
        """Disable the schedules stored as defined in code that this app no longer defines.

        Their history stays. Run it once every process runs this code: a sync
        never disables, since during a rolling deploy a schedule missing here
        may be one that newer code, started elsewhere, defines.

        Args:
            by: Who did it (see `cancel`).

        Returns:
            The names of the schedules disabled.
        """
        pruned = self._schedules.prune()
        for name in pruned:
            self._note("prune", by, schedule=name)
        return pruned

    def schedules(self) -> list[ScheduleOverview]:
        """Every stored schedule: next run, last run and outcome, skipped and missed runs.

        Returns:
            One overview per schedule, by name.
        """
        return self._schedules.overview()

    def schedule_runs(self, name: str, limit: int = 50) -> list[ScheduleRun]:
        """A schedule's scheduled times, newest first, and what became of each.

        A removed schedule's history stays.

        Args:
            name: The schedule's name.
            limit: At most this many (0 or more).

        Returns:
            The times, newest first.

        Raises:
            ScheduleNotFoundError: No schedule of that name was ever stored.
        """
        return self._schedules.runs(name, lookups.list_limit(limit))

    def schedule_health(self, name: str, window: DurationLike = "24h") -> list[ExpectedRun]:
        """Every time the schedule expected within the last `window`, and what became of it.

        Its run (the job's state and duration), skipped or missed (why),
        waiting for the previous run, or "not recorded" when no scheduler acted
        on it; runs triggered by hand too. What `due schedule runs NAME
        --window 24h` prints.

        Args:
            name: The schedule's name.
            window: How far back ("24h", seconds, a timedelta).

        Returns:
            The expected times, oldest first.

        Raises:
            ScheduleNotFoundError: No schedule of that name is stored.
            ConfigurationError: The window is not a duration.
        """
        seconds = to_seconds(window, what="schedule health window")
        store = self.store
        now = store.now()
        overview = {o.stored.name: o for o in store.schedule_overview()}.get(name)
        if overview is None:
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
        since = now - timedelta(seconds=seconds)
        recorded = store.schedule_runs_since(name, since)
        return expected_runs(overview.stored, recorded, since, now, overview.created_at)

    def pause_schedule(self, name: str, *, by: str | None = None) -> None:
        """Stop starting runs; their times are recorded as skipped until resumed.

        Args:
            name: The schedule's name.
            by: Who did it (see `cancel`).

        Raises:
            ScheduleNotFoundError: No schedule of that name is stored.
        """
        self._schedules.pause(name, True)
        self._note("pause", by, schedule=name)

    def resume_schedule(self, name: str, *, by: str | None = None) -> None:
        """Start runs again, from the schedule's next time.

        Args:
            name: The schedule's name.
            by: Who did it (see `cancel`).

        Raises:
            ScheduleNotFoundError: No schedule of that name is stored.
        """
        self._schedules.pause(name, False)
        self._note("resume", by, schedule=name)

    def trigger_schedule(self, name: str, *, by: str | None = None) -> Job:
        """Start a run of the schedule now, by hand.

        Args:
            name: The schedule's name.
            by: Who did it (see `cancel`).

        Returns:
            The run's job.

        Raises:
            ScheduleNotFoundError: No schedule of that name is stored.
        """
        job = self.get(self._schedules.trigger(name))
        self._note("trigger", by, schedule=name, job_id=job.id)
        return job

    def remove_schedule(self, name: str) -> None:
        """Delete a schedule added at run time (its history stays).

        Args:
            name: The schedule's name.

        Raises:
            ScheduleNotFoundError: No schedule of that name is stored.
            ConfigurationError: It is defined in code: delete it there, then
                `prune_schedules` (or pause it).
        """
        self._schedules.remove(name)

    # --- limits -------------------------------------------------------------------------

    def limit(self, name: str, *, rate: str | None = None, concurrency: int | None = None) -> Limit:
        """Declare a limit that tasks name in `limits=`, shared by every worker and host.

        ::

            app.limit("stripe", rate="100/s")        # at most 100 starts in any second
            app.limit("exports", concurrency=2)      # at most 2 running at once
            app.limit("account-sync", concurrency=1) # per key, when a task gives one

        A job over a limit stays queued, spending no attempt, and is claimed
        as soon as the limit allows. Workers write the numbers to the database
        as they start; `due limit set` changes them at run time.

        Args:
            name: The limit's name.
            rate: At most N starts in any window of the period: "100/s",
                "10/m", "1000/h", "5/10m".
            concurrency: At most this many jobs running at any moment.

        Returns:
            The limit.

        Raises:
            ConfigurationError: A bad name or number, neither cap given, or the
                name declared before with other numbers.
        """
        return self.limits.declare(name, rate=rate, concurrency=concurrency)

    def sync_limits(self) -> None:
        """Write the numbers of the declared limits (an operator's stay in force).

        Workers do it as they start; an app does it before its first enqueue.
        """
        self.store.limit_sync(list(self.limits))
        self._limits_written = True

    def _limits_known(self) -> None:
        """Before this process's first enqueue: its limits are in the database.

        So no worker claims its jobs against limits it has never seen (a worker
        still on the code before them caps nothing it does not know).
        """
        if self.limits and not self._limits_written:
            self.sync_limits()

    def limit_overview(self) -> list[LimitOverview]:
        """Every stored limit, with its figures.

        Returns:
            One `LimitOverview` per stored limit, by name: its numbers (and the
            code's), the jobs running against it, the starts in its current
            window, the jobs waiting for it, and its busiest keys.
        """
        return self.store.limit_overview()

    def set_limit(
        self,
        name: str,
        *,
        rate: str | None = None,
        concurrency: int | None = None,
    ) -> Limit:
        """Change a stored limit's numbers at run time, on every worker within seconds.

        They stay until `reset_limit` (a worker's start does not undo them).

        Args:
            name: The limit's name.
            rate: The new rate ("50/s"); None: no rate.
            concurrency: The new concurrency; None: no concurrency cap.

        Returns:
            The numbers now in force.

        Raises:
            ConfigurationError: A bad number, or no limit of that name is stored.
        """
        limit = build_limit(name, rate=rate, concurrency=concurrency)
        if not self.store.limit_set(limit):
            raise ConfigurationError(f"no limit {name!r} is stored (see `due limit`)")
        return limit

    def reset_limit(self, name: str) -> None:
        """Go back to the numbers declared in code for a limit.

        Args:
            name: The limit's name.

        Raises:
            ConfigurationError: No limit of that name is stored.
        """
        if not self.store.limit_reset(name):
            raise ConfigurationError(f"no limit {name!r} is stored (see `due limit`)")

    # --- queues and alerts ------------------------------------------------------------

    def queue(
        self,
        name: str,
        *,
        oldest_due_warning: DurationLike | None = None,
        oldest_due_critical: DurationLike | None = None,
    ) -> None:
        """Declare how long the queue's oldest due job may wait before `due check` alerts.

        The age of the oldest due job is the alert that matters: past the
        warning threshold `due check` (and the example alerting rules) warn,
        past the critical one they go critical::

            app.queue("emails", oldest_due_warning="30s", oldest_due_critical="2m")

        Args:
            name: The queue's name.
            oldest_due_warning: Warn past this wait (default 1 minute).
            oldest_due_critical: Critical past this wait (default 5 minutes).

        Raises:
            ConfigurationError: A threshold that is not a positive duration, or
                a warning over the critical threshold.
            InvalidJobError: The name is not a valid queue name.
        """
        queue_name = validate_queue(name)
        self.queue_thresholds[queue_name] = QueueThresholds.build(
            f"queue {queue_name!r}", oldest_due_warning, oldest_due_critical
        )

    def alert_rules(
        self,
        *,
        oldest_due_warning: DurationLike | None = None,
        oldest_due_critical: DurationLike | None = None,
        judge_schedules: bool = False,
    ) -> AlertRules:
        """The declared thresholds; the two given here stand for every other queue.

        Args:
            oldest_due_warning: For queues not declared with `queue`.
            oldest_due_critical: For queues not declared with `queue`.
            judge_schedules: This app is the code the workers run, so a schedule
                stored as defined in code that it does not define is alerted on
                (`schedule_not_in_code`). Leave it off for an App made only to
                reach the database, which defines nothing.

        Returns:
            The rules `check` applies.

        Raises:
            ConfigurationError: A threshold that is not a positive duration.
        """
        default = QueueThresholds.build(
            "default thresholds", oldest_due_warning, oldest_due_critical
        )
        defined = frozenset(self.defined_schedules) if judge_schedules else None
        return AlertRules(dict(self.queue_thresholds), default, defined)

    def check(
        self,
        *,
        oldest_due_warning: DurationLike | None = None,
        oldest_due_critical: DurationLike | None = None,
        failures_window: DurationLike = DEFAULT_FAILURES_WINDOW,
    ) -> list[Alert]:
        """Every active alert, the most severe first (what `due check --app` prints).

        Late queues, queues no worker serves, stuck jobs, recent failures and
        failed checks, schedules that cannot fire, late or silent schedules,
        schedules stored as defined in code that this app does not define, and
        workflows that cannot advance.

        Args:
            oldest_due_warning: For queues not declared with `queue` (default
                1 minute).
            oldest_due_critical: For queues not declared with `queue` (default
                5 minutes).
            failures_window: How far back jobs failed for good alert (default 1
                hour); results that failed their task's `check=` alert over the
                last hour whatever it says (they are counted only in the
                per-minute figures).

        Returns:
            The alerts; empty when all is well.

        Raises:
            ConfigurationError: A threshold or window that is not a duration.
        """
        window = to_seconds(failures_window, what="failures window")
        rules = self.alert_rules(
            oldest_due_warning=oldest_due_warning,
            oldest_due_critical=oldest_due_critical,
            judge_schedules=True,
        )
        return evaluate(snapshot.take(self, window), rules)

    def dashboard(self, *, token: str | None = None, basic_auth: str | None = None) -> Any:
        """The web dashboard as a Starlette app (the extra `due[web]`).

        Mount it in your ASGI app behind your authentication, or give it its
        own credential.

        Args:
            token: A bearer token every request must carry.
            basic_auth: `"user:password"` for HTTP basic auth.

        Returns:
            The dashboard, an ASGI application.

        Raises:
            ConfigurationError: A credential that cannot be used.
            ImportError: The `web` extra is not installed.
        """
        from due.web.app import create_dashboard
        from due.web.security import Credential

        return create_dashboard(self, credential=Credential.build(token, basic_auth))

    def queues(self) -> list[QueueOverview]:
        """Every queue now: depth, due now, running, waiting, retrying, failed, stuck.

        Also when its oldest due job became due, and whether it is paused.
        Lists the queues of this app's tasks and of workers and schedules even
        when they hold no job. Each count stops at 10,000
        (`QueueOverview.at_least` names those that reached it), so that a look
        costs the same however many jobs are scheduled ahead.

        Returns:
            One overview per queue, by name.
        """
        overviews = {queue.name: queue for queue in self.store.queue_overview()}
        for name in self.tasks.queues():
            overviews.setdefault(name, QueueOverview(name, 0, 0, 0, 0, 0, None, False))
        return [overviews[name] for name in sorted(overviews)]


def _timeout(timeout: DurationLike | None) -> float | None:
    return None if timeout is None else to_seconds(timeout, what="wait timeout")


def _state(state: JobState | str | None) -> JobState | None:
    if state is None or isinstance(state, JobState):
        return state
    try:
        return JobState(state)
    except ValueError:
        names = ", ".join(s.value for s in JobState)
        raise ConfigurationError(f"unknown job state {state!r}; one of: {names}") from None
