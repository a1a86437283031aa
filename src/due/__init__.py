"""due: background jobs, delayed jobs and schedules on SQLite or PostgreSQL.

Never lose a due job, never run one twice by accident, never fail quietly.

::

    import due

    app = due.App()                       # ./due.db, or $DUE_DATABASE_URL

    @app.task(queue="emails", retry=due.Retry(max_attempts=5))
    def send_reset_email(user_id: int) -> None: ...

    send_reset_email.options(delay="10m", key="reset:42").enqueue(42)

The public API is this module's `__all__`, `due.testing`, and the `due`
command. Every other module is internal: its names may change in any release
(docs/explanation/architecture.md shows how they fit together).
"""

from due._version import __version__
from due.app import App
from due.clock import Clock, FakeClock, SystemClock
from due.core.jobs import AttemptError, Job, JobState, Pieces
from due.core.limits import Limit, LimitKeyOverview, LimitOverview
from due.core.records import Action, QueueOverview
from due.core.schedules import Misfire, Overlap, Schedule
from due.errors import (
    ArgumentsError,
    ConfigurationError,
    DueError,
    InvalidJobError,
    InvalidStateError,
    JobCancelled,
    JobNotFoundError,
    LeaseLost,
    NotMigratedError,
    PayloadError,
    ScheduleNotFoundError,
    SchemaError,
    SchemaTooNewError,
    StoreConflictError,
    StoreError,
    StoreUnavailableError,
    UnknownTaskError,
)
from due.long_work.context import Context, JobTransaction
from due.request import JobRequest
from due.retry import Retry
from due.shown_arguments import DEFAULT_REDACT
from due.task import Task, TaskWithOptions
from due.visibility.alerts import Alert, Severity
from due.workflows import Step, StepStatus, Workflow, WorkflowHandle, WorkflowStatus

__all__ = [
    "__version__",
    # configure and register
    "App",
    "DEFAULT_REDACT",
    "Retry",
    "Task",
    "TaskWithOptions",
    # jobs
    "AttemptError",
    "Context",
    "JobTransaction",
    "Job",
    "JobRequest",
    "JobState",
    "Pieces",
    "QueueOverview",
    "Limit",
    "LimitKeyOverview",
    "LimitOverview",
    # workflows
    "Step",
    "StepStatus",
    "Workflow",
    "WorkflowHandle",
    "WorkflowStatus",
    # schedules
    "Misfire",
    "Overlap",
    "Schedule",
    # visibility
    "Action",
    "Alert",
    "Severity",
    # time
    "Clock",
    "FakeClock",
    "SystemClock",
    # errors
    "ArgumentsError",
    "ConfigurationError",
    "DueError",
    "InvalidJobError",
    "InvalidStateError",
    "JobCancelled",
    "JobNotFoundError",
    "LeaseLost",
    "NotMigratedError",
    "PayloadError",
    "ScheduleNotFoundError",
    "SchemaError",
    "SchemaTooNewError",
    "StoreConflictError",
    "StoreError",
    "StoreUnavailableError",
    "UnknownTaskError",
]
