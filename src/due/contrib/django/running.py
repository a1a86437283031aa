"""Django tasks as due tasks: registered under their module path, run by a
due worker with Django's signals, its `TaskContext` and its connections
handled as a request handles them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
import threading
import traceback
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.dispatch import Signal
from django.tasks import Task, TaskContext, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from due.app import App
from due.contrib.django.attempts import AttemptStart, this_attempt_started
from due.contrib.django.results import running_result
from due.core.jobs import Job
from due.errors import ConfigurationError, class_path
from due.instrumentation import AttemptInfo, add_attempt_hook
from due.long_work.context import Context
from due.retry import Retry
from due.shown_arguments import scrubbed, secret_texts
from due.task import Task as DueAppTask

_lock = threading.Lock()
_seen: dict[str, tuple[Task, type]] = {}
"""By name: every Django task seen so far, whatever its backend (any task may be
sent to any backend with `.using(backend=...)`, so every App knows them all)."""
log = logging.getLogger("due.contrib.django")


TASK_FAILURES = (Exception, SystemExit, KeyboardInterrupt)
"""What a task raises that fails its attempt (as due's worker records it): its
`sys.exit()` and its own KeyboardInterrupt too, as Django's backends fail a
task that exits. due's own stops (a cancel, a lost lease, an asyncio
cancellation) pass through."""


class ResultNotJSON(TypeError):
    """A task returned what JSON cannot hold: it failed (as Django says), and is
    not run again (its work is done)."""


def registered(app: App, alias: str, task: Task, sender: type) -> DueAppTask[Any, Any]:
    """The due task that runs `task` on `app`, the App of the backend `alias`
    (registered on first sight of its function)."""
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
        due_task = _register(app, alias, task, sender)
        _seen.setdefault(name, (task, sender))
        return due_task


def register_seen(app: App, alias: str) -> None:
    """Register on `app` (the App of `alias`) every Django task seen so far that it lacks."""
    with _lock:
        for name, (task, sender) in _seen.items():
            if name not in app.tasks:
                _register(app, alias, task, sender)


def _attempt_hook(info: AttemptInfo) -> AttemptStart | None:
    """Each attempt of a Django task has its start noted (attempts.py)."""
    return AttemptStart(info) if info.task in _seen else None


add_attempt_hook(_attempt_hook)


def _options(task: Task) -> dict[str, Any]:
    return task.due_options() if hasattr(task, "due_options") else {}


def _register(app: App, alias: str, task: Task, sender: type) -> DueAppTask[Any, Any]:
    options = _options(task)
    # A return value JSON cannot hold fails the job at once: its work is done.
    retry = options.pop("retry", None) or Retry()
    retry = dataclasses.replace(retry, discard_on=(*retry.discard_on, ResultNotJSON))
    make = _async_handler if task_is_async(task) else _handler
    return app.task(
        name=task.module_path,
        queue=task.queue_name,
        priority=task.priority,
        retry=retry,
        **options,
    )(make(task, sender, alias))


def task_is_async(task: Task) -> bool:
    return inspect.iscoroutinefunction(task.func)


def _signature(task: Task) -> inspect.Signature:
    """The function's parameters behind due's context (Django's `context` taken
    out: the worker gives it), so a wrong call is refused at enqueue."""
    parameters = list(inspect.signature(task.func).parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    # A name no function of the user's has: the context is found by its annotation.
    first = inspect.Parameter("_due_context", inspect.Parameter.POSITIONAL_ONLY, annotation=Context)
    return inspect.Signature([first, *parameters])


def _handler(task: Task, sender: type, alias: str) -> Any:
    as_sent = _AsSent(task, alias)

    def run(ctx: Context, /, *args: Any, **kwargs: Any) -> Any:
        close_old_connections()  # as at the start of a request
        try:
            earlier = _earlier(ctx)
            result = _started(ctx, as_sent(ctx.queue), args, kwargs, earlier)
            send_robustly(task_started, sender, result)
            try:
                # task.func, not task.call: known to be sync, and Task.call asks
                # inspect again on every call.
                if task.takes_context:
                    value = task.func(TaskContext(task_result=result), *args, **kwargs)
                else:
                    value = task.func(*args, **kwargs)
                value = _json(value, task)
            except TASK_FAILURES as error:
                failure = error
            else:
                _succeeded(result, value)
                send_robustly(task_finished, sender, result, ctx)
                return value
            # Out of the except clause: Django's own receiver logs the exception
            # being handled, unscrubbed, traceback and all. Receivers get the
            # result's error, scrubbed as due's stored one is.
            if _final(ctx, failure):
                _failed(result, failure, _secrets(ctx, args, kwargs))
                send_robustly(task_finished, sender, result, ctx)
            raise failure
        finally:
            close_old_connections()

    return _shaped(run, task)


def _async_handler(task: Task, sender: type, alias: str) -> Any:
    as_sent = _AsSent(task, alias)

    async def run(ctx: Context, /, *args: Any, **kwargs: Any) -> Any:
        # The ORM runs in sync_to_async's thread: its connections are checked there.
        await sync_to_async(close_old_connections)()
        try:
            earlier = await asyncio.to_thread(_earlier, ctx)  # a read: not on the loop
            result = _started(ctx, as_sent(ctx.queue), args, kwargs, earlier)
            await _asend(task_started, sender, result)
            try:
                if task.takes_context:
                    value = await task.acall(TaskContext(task_result=result), *args, **kwargs)
                else:
                    value = await task.acall(*args, **kwargs)
                value = _json(value, task)
            except TASK_FAILURES as error:
                failure = error
            else:
                _succeeded(result, value)
                await _asend(task_finished, sender, result, ctx)
                return value
            if _final(ctx, failure):  # (out of the except clause, as in _handler)
                _failed(result, failure, _secrets(ctx, args, kwargs))
                await _asend(task_finished, sender, result, ctx)
            raise failure
        finally:
            await sync_to_async(close_old_connections)()

    return _shaped(run, task)


def _shaped(run: Any, task: Task) -> Any:
    functools.update_wrapper(run, task.func)
    run.__signature__ = _signature(task)
    run.__annotations__ = {"_due_context": Context}  # due finds its context by this
    return run


def _json(value: Any, task: Task) -> Any:
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as error:
        raise ResultNotJSON(
            f"task {task.module_path} returned {type(value).__name__}, which JSON cannot "
            f"hold ({error}); return JSON types (dict, list, str, int, float, bool, None)"
        ) from error


def _earlier(ctx: Context) -> Job | None:
    """The job as stored, for a retry (its earlier errors); None for a first attempt."""
    app = ctx._app
    return app.get(ctx.job_id) if ctx.attempt > 1 and app is not None else None


class _AsSent:
    """The task as its jobs were sent: the handler's backend (refresh() reads
    there) and the job's queue. Made once per queue, not per job: a copy of a
    Task is checked again by its backend."""

    def __init__(self, task: Task, alias: str) -> None:
        self.task, self.alias = task, alias
        self.by_queue: dict[str, Task] = {}

    def __call__(self, queue: str) -> Task:
        found = self.by_queue.get(queue)
        if found is None:
            found = self.task
            if found.backend != self.alias or found.queue_name != queue:
                with contextlib.suppress(InvalidTask):
                    found = dataclasses.replace(found, backend=self.alias, queue_name=queue)
            self.by_queue[queue] = found
        return found


def _started(ctx: Context, task: Task, args: Any, kwargs: Any, earlier: Job | None) -> Any:
    return running_result(
        task,
        ctx.job_id,
        args,
        kwargs,
        backend=task.backend,
        enqueued_at=ctx.enqueued_at,
        attempt_started=this_attempt_started(),
        earlier=earlier,
        worker=ctx.worker,
    )


def send_robustly(signal: Signal, sender: type, result: Any, ctx: Context | None = None) -> None:
    """A task signal, sent robustly: a receiver that raises is logged, and does not
    make a done attempt fail (and run again). Not sent for an attempt already
    over (it ran past its timeout: due recorded its end, and a retry may run)."""
    if ctx is not None and ctx.lease_lost:
        return
    for receiver, outcome in signal.send_robust(sender, task_result=result):
        if isinstance(outcome, Exception):
            log.error("a receiver of a task signal raised: %r", receiver, exc_info=outcome)


async def _asend(signal: Signal, sender: type, result: Any, ctx: Context | None = None) -> None:
    if ctx is not None and ctx.lease_lost:
        return
    for receiver, outcome in await signal.asend_robust(sender, task_result=result):
        if isinstance(outcome, Exception):
            log.error("a receiver of a task signal raised: %r", receiver, exc_info=outcome)


def _final(ctx: Context, error: BaseException) -> bool:
    """Whether this failure ends the job (no retry follows): only then has the task finished."""
    app = ctx._app
    if app is None or ctx.task not in app.tasks:
        return ctx.is_last_attempt
    policy = app.tasks.get(ctx.task).config.retry
    return not policy.should_retry(error, ctx.attempt, ctx.max_attempts)


def _secrets(ctx: Context, args: Any, kwargs: Any) -> set[str]:
    """The values of the job's arguments that due shows hidden (as its worker
    scrubs them from the error it stores)."""
    app = ctx._app
    if app is None or ctx.task not in app.tasks:
        return set()
    task = app.tasks.get(ctx.task)
    return secret_texts(args, kwargs, task.redact, task.redacted_positions)


def _failed(result: Any, error: BaseException, secrets: set[str]) -> None:
    object.__setattr__(result, "status", TaskResultStatus.FAILED)
    object.__setattr__(result, "finished_at", timezone.now())
    result.errors.append(
        TaskError(
            exception_class_path=class_path(error),
            traceback=scrubbed("".join(traceback.format_exception(error)), secrets),
        )
    )


def _succeeded(result: Any, value: Any) -> None:
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
