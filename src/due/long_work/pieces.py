"""Pieces as requests: each item becomes a validated job, known by its task
and arguments however they are spelled (so spawning it again adds nothing),
and a completion task is checked against the summary it will be given."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from due.core.records import NewJob
from due.errors import ConfigurationError
from due.request import JobRequest
from due.store.pieces import completion_spec as stored_completion_spec

if TYPE_CHECKING:  # (task.py imports the Context, which imports this module)
    from due.task import Registry, Task

PIECE_POLICIES = ("continue", "fail")
Item = tuple[Any, ...] | list[Any] | JobRequest
"""A piece: its positional arguments, or a `task.request(...)`."""


def piece_jobs(
    tasks: Registry,
    prepare: Callable[[list[JobRequest]], list[NewJob]],
    task: Task[Any, Any] | str,
    items: Iterable[Item],
) -> list[NewJob]:
    """Validated pieces (all refused if one is bad). A piece starts when it is
    spawned and is known by its task and arguments: it takes no key or delay."""
    name = task if isinstance(task, str) else task.name
    requests: list[JobRequest] = [
        _piece_request(item) if isinstance(item, JobRequest) else JobRequest(name, _arguments(item))
        for item in items
    ]
    jobs = prepare(requests)
    for job, request in zip(jobs, requests, strict=True):
        job.identity = tasks.get(job.task).canonical_arguments(request.args, request.kwargs)
    return jobs


def completion_spec(tasks: Registry, task: Task[Any, Any] | str) -> str:
    """How a parent stores its completion task, which must take the summary."""
    resolved = tasks.get(task if isinstance(task, str) else task.name)
    resolved.check_arguments(({"parent": 0, "pieces": 0},), {})
    options = resolved.config
    return stored_completion_spec(
        resolved.name,
        options.queue,
        options.priority,
        options.retry.max_attempts,
        options.stuck_after,
    )


def check_policy(on_piece_failure: str | None) -> None:
    if on_piece_failure is not None and on_piece_failure not in PIECE_POLICIES:
        raise ConfigurationError(
            f"on_piece_failure={on_piece_failure!r}: choose 'continue' or 'fail'"
        )


def _piece_request(request: JobRequest) -> JobRequest:
    if request.key is not None:
        raise ConfigurationError(
            f"a piece of {request.task!r} was given key={request.key!r}: pieces are known by "
            "their task and arguments, so spawning one again adds nothing; give no key"
        )
    if request.delay is not None or request.run_at is not None:
        raise ConfigurationError(
            f"a piece of {request.task!r} was given a delay or run_at: pieces start when "
            "they are spawned; give neither"
        )
    return request


def _arguments(item: Any) -> tuple[Any, ...]:
    if isinstance(item, tuple | list):
        return tuple(item)
    raise ConfigurationError(
        f"a piece is given as a tuple of its positional arguments or as task.request(...), "
        f"got {item!r}"
    )
