"""Django tasks as due tasks: registered under their module path, run by a
due worker with Django's signals, its `TaskContext` and its connections
handled as a request handles them."""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any

from django.db import close_old_connections
from django.tasks import Task, TaskContext, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from due.app import App
from due.contrib.django.results import running_result
from due.errors import ConfigurationError, class_path
from due.long_work.context import Context
from due.task import Task as DueAppTask

_lock = threading.Lock()
_seen: dict[str, tuple[Task, type]] = {}
"""By name: every Django task seen so far, whatever its backend (any task may be
sent to any backend with `.using(backend=...)`, so every App knows them all)."""


def registered(app: App, task: Task, sender: type) -> DueAppTask[Any, Any]:
    """The due task that runs `task` (registered on first sight of its function)."""
    name = task.module_path
    with _lock:
        if name in app.tasks:
            seen = _seen.get(name)
            if seen is not None and seen[0] is not task and _options(seen[0]) != _options(task):
                raise ConfigurationError(
                    f"task {name!r} was declared with due options {_options(seen[0])}, "
                    f"and now with {_options(task)}: a task has one set of options"
                )
            return app.tasks.get(name)
        due_task = _register(app, task, sender)
        _seen.setdefault(name, (task, sender))
        return due_task


def register_seen(app: App) -> None:
    """Register on `app` every Django task seen so far that it does not know."""
    with _lock:
        for name, (task, sender) in _seen.items():
            if name not in app.tasks:
                _register(app, task, sender)


def _options(task: Task) -> dict[str, Any]:
    return task.due_options() if hasattr(task, "due_options") else {}


def _register(app: App, task: Task, sender: type) -> DueAppTask[Any, Any]:
    options = _options(task)
    handler = _async_handler(task, sender) if task_is_async(task) else _handler(task, sender)
    return app.task(
        name=task.module_path, queue=task.queue_name, priority=task.priority, **options
    )(handler)


def task_is_async(task: Task) -> bool:
    return inspect.iscoroutinefunction(task.func)


def _signature(task: Task) -> inspect.Signature:
    """The function's parameters behind due's context (Django's `context` taken
    out: the worker gives it), so a wrong call is refused at enqueue."""
    parameters = list(inspect.signature(task.func).parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    # A name no function of the user's has: the context is found by its annotation.
    first = inspect.Parameter(
        "_due_context", inspect.Parameter.POSITIONAL_ONLY, annotation=Context
    )
    return inspect.Signature([first, *parameters])


def _handler(task: Task, sender: type) -> Any:
    def run(ctx: Context, /, *args: Any, **kwargs: Any) -> Any:
        close_old_connections()  # as at the start of a request
        try:
            result = _started(ctx, task, args, kwargs, sender)
            try:
                # task.func, not task.call: known to be sync, and Task.call asks
                # inspect again on every call.
                if task.takes_context:
                    value = task.func(TaskContext(task_result=result), *args, **kwargs)
                else:
                    value = task.func(*args, **kwargs)
                value = normalize_json(value)
            except Exception as error:
                if _final(ctx, error):
                    _failed(result, error)
                    task_finished.send(sender, task_result=result)
                raise
            _succeeded(result, value)
            task_finished.send(sender, task_result=result)
            return value
        finally:
            close_old_connections()

    return _shaped(run, task)


def _async_handler(task: Task, sender: type) -> Any:
    async def run(ctx: Context, /, *args: Any, **kwargs: Any) -> Any:
        result = _started(ctx, task, args, kwargs, sender, send=False)
        await task_started.asend(sender, task_result=result)
        try:
            if task.takes_context:
                value = await task.acall(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = await task.acall(*args, **kwargs)
            value = normalize_json(value)
        except Exception as error:
            if _final(ctx, error):
                _failed(result, error)
                await task_finished.asend(sender, task_result=result)
            raise
        _succeeded(result, value)
        await task_finished.asend(sender, task_result=result)
        return value

    return _shaped(run, task)


def _shaped(run: Any, task: Task) -> Any:
    functools.update_wrapper(run, task.func)
    run.__signature__ = _signature(task)
    run.__annotations__ = {"_due_context": Context}  # due finds its context by this
    return run


def _started(
    ctx: Context, task: Task, args: Any, kwargs: Any, sender: type, *, send: bool = True
) -> Any:
    # A first attempt's result needs no read; a retry's shows the earlier errors.
    earlier = ctx._app.get(ctx.job_id) if ctx.attempt > 1 and ctx._app is not None else None
    result = running_result(
        task,
        ctx.job_id,
        args,
        kwargs,
        backend=task.backend,
        enqueued_at=ctx.enqueued_at,
        started_at=timezone.now(),
        earlier=earlier,
        worker=ctx.worker,
    )
    if send:
        task_started.send(sender, task_result=result)
    return result


def _final(ctx: Context, error: Exception) -> bool:
    """Whether this failure ends the job (no retry follows): only then has the task finished."""
    app = ctx._app
    if app is None or ctx.task not in app.tasks:
        return ctx.is_last_attempt
    policy = app.tasks.get(ctx.task).config.retry
    return not policy.should_retry(error, ctx.attempt, ctx.max_attempts)


def _failed(result: Any, error: Exception) -> None:
    import traceback

    object.__setattr__(result, "status", TaskResultStatus.FAILED)
    object.__setattr__(result, "finished_at", timezone.now())
    result.errors.append(
        TaskError(
            exception_class_path=class_path(error),
            traceback="".join(traceback.format_exception(error)),
        )
    )


def _succeeded(result: Any, value: Any) -> None:
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
