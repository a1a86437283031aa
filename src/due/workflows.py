"""Workflows: jobs that wait for other jobs.

`app.workflow("month-end")` starts a graph; `flow.add(request, name=...,
after=[...])` adds a step (any task's request: its queue, priority, retry
policy and limits apply); `flow.enqueue()` writes the workflow and every step
in one transaction. A step with upstream steps waits (`waiting`, holding no
slot) until the transaction that records the end of its last upstream step
releases it, or cancels it by its policy (store/workflows.py). A step's
handler reads its upstream steps' results by name: `ctx.upstream["rates"]`.

Checked before anything is written: a step's name is given once, a step
comes after steps of the same workflow only (added before it, so the graph
has no cycle), a workflow has at most `MAX_STEPS` steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from due.core.jobs import JobState
from due.core.records import StepRequest
from due.errors import ConfigurationError
from due.request import JobRequest

if TYPE_CHECKING:
    from due.app import App

MAX_STEPS = 10_000
"""The most steps one workflow may have."""
POLICIES = ("cancel", "run")
MAX_STEP_NAME = 200


@dataclass(eq=False)
class Step:
    """A step of a workflow, as `flow.add` returns it."""

    workflow: Workflow
    name: str
    request: JobRequest
    after: tuple[Step, ...]
    on_upstream_failure: str
    job_id: int | None = None
    """Its job's id, once the workflow is enqueued."""


@dataclass(frozen=True)
class WorkflowHandle:
    """An enqueued workflow: its id, and each step's job id by name."""

    id: int
    job_ids: dict[str, int]


@dataclass(frozen=True)
class StepStatus:
    """One step as `app.workflow_status` sees it."""

    name: str
    job_id: int
    state: JobState
    task: str
    after: tuple[str, ...]
    """The names of the steps it comes after."""
    started_at: datetime | None = None
    """The start of its job's last attempt, or None before it started."""
    finished_at: datetime | None = None
    """The end of its job, or None before it ended."""

    @property
    def duration(self) -> float | None:
        """Seconds from its start to its end (None until it has both)."""
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, (self.finished_at - self.started_at).total_seconds())


@dataclass(frozen=True)
class WorkflowStatus:
    """A workflow and its steps, as stored now."""

    id: int
    name: str
    state: str
    """running, succeeded, failed or cancelled."""
    steps: dict[str, StepStatus]
    created_at: datetime
    finished_at: datetime | None = None
    steps_total: int = 0
    steps_ended: int = 0

    @property
    def ended(self) -> bool:
        """Whether every step has ended."""
        return self.state != "running"


@dataclass(frozen=True)
class WorkflowSummary:
    """A workflow without its steps, as `app.workflows()` lists it."""

    id: int
    name: str
    state: str
    """running, succeeded, failed or cancelled."""
    steps_total: int
    steps_ended: int
    created_at: datetime
    finished_at: datetime | None = None
    steps_failed: int = 0
    steps_cancelled: int = 0

    @property
    def ended(self) -> bool:
        """Whether every step has ended."""
        return self.state != "running"


@dataclass(frozen=True)
class StuckWorkflow:
    """A running workflow that cannot advance: no step queued or running, and
    `step` waits with every upstream step ended, or (`step` None) every step
    has ended though the workflow still says it runs."""

    id: int
    name: str
    step: str | None


@dataclass(eq=False)
class Workflow:
    """A graph of steps to enqueue together (`app.workflow(name)`)."""

    app: App
    name: str
    steps: list[Step] = field(default_factory=list)
    enqueued: WorkflowHandle | None = None

    def add(
        self,
        request: JobRequest,
        *,
        name: str | None = None,
        after: Iterable[Step] = (),
        on_upstream_failure: str = "cancel",
    ) -> Step:
        """Add a step: a job, run once every step in `after` has ended.

        Args:
            request: The job, as `task.request(...)` makes it.
            name: Its name in the workflow (unique; default: "step-N"), the
                key of its result in its dependents' `ctx.upstream`.
            after: Steps of this workflow, added before, that it comes after.
            on_upstream_failure: "cancel" (default: a failed or cancelled
                upstream step cancels this step, and its dependents in turn)
                or "run" (it runs anyway; `ctx.upstream_states` says what
                happened upstream).

        Returns:
            The step; `step.job_id` is set once the workflow is enqueued.

        Raises:
            ConfigurationError: A name given twice, a step of another workflow
                or one not added, a bad policy, too many steps, or a workflow
                already enqueued.
        """
        if self.enqueued is not None:
            raise ConfigurationError(f"workflow {self.name!r} is enqueued: add no more steps")
        if not isinstance(request, JobRequest):
            raise ConfigurationError(
                f"workflow {self.name!r}: add() takes a job request (task.request(...)), "
                f"got {type(request).__name__}"
            )
        if len(self.steps) >= MAX_STEPS:
            raise ConfigurationError(f"workflow {self.name!r}: at most {MAX_STEPS} steps")
        if on_upstream_failure not in POLICIES:
            raise ConfigurationError(
                f"on_upstream_failure must be 'cancel' or 'run', got {on_upstream_failure!r}"
            )
        if request.key is not None:
            raise ConfigurationError(
                f"workflow {self.name!r}: a step takes no key= (a step is known by its name)"
            )
        step_name = f"step-{len(self.steps) + 1}" if name is None else name
        check_step_name(step_name)
        if any(step.name == step_name for step in self.steps):
            raise ConfigurationError(f"workflow {self.name!r} has a step named {step_name!r}")
        upstream = tuple(after)
        for other in upstream:
            if not isinstance(other, Step) or other.workflow is not self:
                raise ConfigurationError(
                    f"step {step_name!r} comes after {other!r}: not a step of workflow "
                    f"{self.name!r} (a step comes after steps added to its own workflow)"
                )
        step = Step(self, step_name, request, upstream, on_upstream_failure)
        self.steps.append(step)
        return step

    def enqueue(self) -> WorkflowHandle:
        """Write the workflow and every step, in one transaction.

        Returns:
            Its id and its steps' job ids (also set on each step).

        Raises:
            ConfigurationError: It has no step, or was enqueued already.
            InvalidJobError: A step's request is refused (nothing is written).
        """
        if self.enqueued is not None:
            raise ConfigurationError(f"workflow {self.name!r} is enqueued already")
        if not self.steps:
            raise ConfigurationError(f"workflow {self.name!r} has no step")
        index = {id(step): position for position, step in enumerate(self.steps)}
        jobs = self.app._prepare([step.request for step in self.steps])
        requests = [
            StepRequest(
                job,
                step.name,
                tuple(index[id(other)] for other in step.after),
                step.on_upstream_failure,
            )
            for job, step in zip(jobs, self.steps, strict=True)
        ]
        workflow_id, ids = self.app.store.workflow_enqueue(self.name, requests)
        for step, job_id in zip(self.steps, ids, strict=True):
            step.job_id = job_id
        job_ids = {step.name: job_id for step, job_id in zip(self.steps, ids, strict=True)}
        self.enqueued = WorkflowHandle(workflow_id, job_ids)
        return self.enqueued


def check_step_name(name: Any) -> str:
    """A step's name, checked: a non-empty string of at most 200 characters."""
    if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
        raise ConfigurationError(
            f"a step's name is a non-empty string of at most {MAX_STEP_NAME} characters, "
            f"got {name!r}"
        )
    if "\x00" in name:
        raise ConfigurationError(f"a step's name holds a NUL character: {name!r}")
    return name


def status_from(row: dict[str, Any], steps: Sequence[dict[str, Any]]) -> WorkflowStatus:
    """A WorkflowStatus from the store's rows."""
    return WorkflowStatus(
        id=int(row["id"]),
        name=row["name"],
        state=row["state"],
        steps={
            step["step_name"]: StepStatus(
                name=step["step_name"],
                job_id=int(step["id"]),
                state=JobState(step["state"]),
                task=step["task"],
                after=tuple(_names(step["after"])),
                started_at=step.get("started_at"),
                finished_at=step.get("finished_at"),
            )
            for step in steps
        },
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        steps_total=int(row["steps_total"]),
        steps_ended=int(row["steps_ended"]),
    )


def summary_from(row: dict[str, Any]) -> WorkflowSummary:
    """A WorkflowSummary from the store's row."""
    return WorkflowSummary(
        id=int(row["id"]),
        name=row["name"],
        state=row["state"],
        steps_total=int(row["steps_total"]),
        steps_ended=int(row["steps_ended"]),
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        steps_failed=int(row.get("steps_failed") or 0),
        steps_cancelled=int(row.get("steps_cancelled") or 0),
    )


def _names(value: Any) -> list[str]:
    if isinstance(value, str):  # SQLite: a JSON array
        import json

        return list(json.loads(value))
    return list(value or [])
