"""due's jobs as Django's `TaskResult`s."""

from __future__ import annotations

from typing import Any

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils.module_loading import import_string

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


def result_of(job: Job, backend: str, task: Task | None = None) -> TaskResult:
    """The TaskResult of a job as stored."""
    result = TaskResult(
        task=task if task is not None else task_of(job),
        id=str(job.id),
        status=STATUS[job.state],
        enqueued_at=job.created_at,
        started_at=job.started_at,
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
    started_at: Any,
    earlier: Job | None,
    worker: str | None,
) -> TaskResult:
    """The TaskResult of an attempt as it starts, without a read for a first attempt."""
    errors = [] if earlier is None else result_of(earlier, backend, task).errors
    ids = [] if earlier is None else worker_ids(earlier)[: earlier.attempt - 1]
    return TaskResult(
        task=task,
        id=str(job_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=enqueued_at,
        started_at=started_at,
        finished_at=None,
        last_attempted_at=started_at,
        args=list(args),
        kwargs=dict(kwargs),
        backend=backend,
        errors=errors,
        worker_ids=[*ids, worker or ""],
    )
