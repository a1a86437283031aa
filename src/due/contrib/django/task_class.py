"""`DueTask`: Django's `Task` with due's own options.

Django 6.1 hands `@task(**kwargs)` to the backend's `task_class`, so with the
due backend `@task(retry=due.Retry(max_attempts=5), timeout="2m")` works as
written. Django 6.0 does not: there, `due.contrib.django.task` takes the same
options (and works on 6.1 too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, Task
from django.tasks import task_backends as _backends
from django.tasks.base import DEFAULT_TASK_PRIORITY

from due.durations import DurationLike
from due.retry import Retry


@dataclass(frozen=True, slots=True, kw_only=True)
class DueTask(Task):  # type: ignore[misc]
    """A Django task run by due, with due's options.

    Each is optional; unset, the task has due's defaults (20 attempts with
    backoff, no timeout, the worker's lease).
    """

    retry: Retry | None = None
    """How failures are retried (`due.Retry`)."""
    timeout: DurationLike | None = None
    """An attempt running longer fails, and is retried per `retry`."""
    lease: DurationLike | None = None
    """How long a worker holds a job between heartbeats."""
    unique_for: DurationLike | None = None
    """How long a job's key keeps deduplicating after success."""
    stuck_after: DurationLike | None = None
    """A running job whose progress has not moved for this long is flagged stuck."""
    limits: Any = field(default=None, compare=False)
    """The due limits its jobs count against (as `@app.task(limits=...)`)."""
    key: str | None = None
    """Deduplicate: while a job with this key is active, enqueue returns it
    (set per call with `.using(key=...)`)."""
    limit_keys: Any = field(default=None, compare=False)
    """The keys of its limits, by limit name (set per call with `.using(limit_keys=...)`)."""

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        key: str | None = None,
        limit_keys: dict[str, str] | None = None,
    ) -> DueTask:
        """A copy with other defaults: Django's, and due's per-call `key` and `limit_keys`."""
        changed: DueTask = Task.using(
            self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )
        extra: dict[str, Any] = {}
        if key is not None:
            extra["key"] = key
        if limit_keys is not None:
            extra["limit_keys"] = limit_keys
        return dataclasses.replace(changed, **extra) if extra else changed

    def due_options(self) -> dict[str, Any]:
        """The options of `@app.task` this task was given."""
        options = {
            "retry": self.retry,
            "timeout": self.timeout,
            "lease": self.lease,
            "unique_for": self.unique_for,
            "stuck_after": self.stuck_after,
            "limits": self.limits,
        }
        return {name: value for name, value in options.items() if value is not None}


def task(
    function: Callable[..., Any] | None = None,
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    **due_options: Any,
) -> Any:
    """Django's `@task`, with due's options on any Django 6 (6.0 does not forward them).

    For example::

        @task(queue_name="emails", retry=due.Retry(max_attempts=5), timeout="2m")
        def send_welcome_email(user_id): ...
    """
    if "run_after" in due_options:
        raise TypeError(
            "run_after cannot be given to @task; use .using(run_after=...) when enqueueing"
        )

    def wrapper(fn: Callable[..., Any]) -> Any:
        task_class = _backends[backend].task_class
        if not issubclass(task_class, DueTask) and due_options:
            raise TypeError(
                f"backend {backend!r} is not due's, so its tasks take no due options "
                f"({', '.join(sorted(due_options))})"
            )
        return task_class(
            func=fn,
            priority=priority,
            queue_name=queue_name,
            backend=backend,
            takes_context=takes_context,
            run_after=None,
            **due_options,
        )

    return wrapper(function) if function is not None else wrapper
