"""due's jobs as Django's `TaskResult`s."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils.module_loading import import_string

from due.contrib.django.attempts import first_started_at
from due.contrib.django.task_class import DueTask
from due.core.jobs import AttemptError, Job, JobState

STATUS = {
    JobState.QUEUED: TaskResultStatus.READY,  # also a failed attempt waiting for its retry
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.WAITING: TaskResultStatus.RUNNING,  # waiting for its pieces
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,  # Django has no cancelled status
}

# What an attempt that raised nothing ended with, as the exception Django's
# TaskError names (it must import as an exception class).
KIND_EXCEPTIONS = {
    "timeout": "builtins.TimeoutError",
    "lease_lost": "due.errors.LeaseLost",
    "cancelled": "due.errors.JobCancelled",
    "unknown_task": "due.errors.UnknownTaskError",
}


def task_of(job: Job) -> Task:
    """The Django task a job runs (found by its name, the task's module path)."""
    try:
        found = import_string(job.task)
    except ImportError:
        found = None
    if not isinstance(found, Task):
        raise TaskResultDoesNotExist(f"job {job.id} is not a Django task's ({job.task!r})")
    return found


def task_as_sent(job: Job, backend: str) -> Task:
    """The task a job was sent as: its module's, with what `.using()` changed
    for this job (backend, queue, priority, run_after, and due's key)."""
    task = task_of(job)
    sent: dict[str, Any] = {
        "backend": backend,
        "queue_name": job.queue,
        "priority": job.priority,
        "run_after": run_after_of(job),
    }
    if isinstance(task, DueTask):
        sent["key"] = job.key
    changes = {name: value for name, value in sent.items() if getattr(task, name) != value}
    return _unchecked_copy(task, changes) if changes else task


def run_after_of(job: Job) -> datetime | None:
    """The `run_after` a job was sent with: its `run_at`, unless that is when it
    was enqueued (sent without one). A retry's backoff moves `run_at`: once an
    attempt has failed, the time first asked for is no longer known (None)."""
    if job.errors or job.run_at == job.created_at:
        return None
    return job.run_at


def _unchecked_copy(task: Task, changes: dict[str, Any]) -> Task:
    """`task` with `changes`, not checked again by its backend: they are a job's,
    checked when it was enqueued (its queue may since have left QUEUES)."""
    copy = object.__new__(type(task))
    for field in dataclasses.fields(task):
        object.__setattr__(copy, field.name, changes.get(field.name, getattr(task, field.name)))
    return copy


def result_of(job: Job, backend: str, task: Task | None = None) -> TaskResult:
    """The TaskResult of a job as stored."""
    result = TaskResult(
        task=task if task is not None else task_of(job),
        id=str(job.id),
        status=STATUS[job.state],
        enqueued_at=job.created_at,
        started_at=first_started_at(job),
        finished_at=job.finished_at if job.is_final else None,
        last_attempted_at=job.started_at,
        args=list(job.args),
        kwargs=dict(job.kwargs),
        backend=backend,
        errors=[task_error(error) for error in job.errors if error.kind != "unknown_task"],
        worker_ids=worker_ids(job),
    )
    if job.state == JobState.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def task_error(error: AttemptError) -> TaskError:
    path = error.exception or KIND_EXCEPTIONS.get(error.kind, "builtins.Exception")
    return TaskError(exception_class_path=path, traceback=error.traceback or error.error)


def worker_ids(job: Job) -> list[str]:
    """A worker id per attempt made: the failed ones' from the history, then the latest's."""
    ids = [e.worker or "" for e in job.errors if e.kind != "unknown_task" and e.attempt > 0]
    if job.attempt > len(ids) and job.worker:
        ids.append(job.worker)
    return ids


def running_result(
    task: Task,
    job_id: int,
    args: Any,
    kwargs: Any,
    *,
    backend: str,
    enqueued_at: Any,
    attempt_started: Any,
    earlier: Job | None,
    worker: str | None,
) -> TaskResult:
    """The TaskResult of an attempt as it starts, without a read for a first
    attempt (`earlier`: the job as stored, for a later one)."""
    errors = [] if earlier is None else result_of(earlier, backend, task).errors
    ids = [] if earlier is None else worker_ids(earlier)[: earlier.attempt - 1]
    first = None if earlier is None else first_started_at(earlier)
    return TaskResult(
        task=task,
        id=str(job_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=enqueued_at,
        started_at=first or attempt_started,
        finished_at=None,
        last_attempted_at=attempt_started,
        args=list(args),
        kwargs=dict(kwargs),
        backend=backend,
        errors=errors,
        worker_ids=[*ids, worker or ""],
    )
