"""Every error `due` raises, in one tree.

::

    DueError
    ├── ConfigurationError         a bad URL, option or task definition
    ├── InvalidJobError            bad input at enqueue; nothing was written
    │   ├── UnknownTaskError       no task registered under that name
    │   ├── ArgumentsError         arguments do not fit the task's signature
    │   └── PayloadError           not JSON-serialisable, or over the size limit
    ├── JobNotFoundError           no job with that id
    ├── ScheduleNotFoundError      no schedule with that name
    ├── InvalidStateError          the job's state does not allow that action
    ├── SchemaError                the database schema is not the one we know
    │   ├── NotMigratedError       no schema yet: run `due migrate`
    │   └── SchemaTooNewError      a newer `due` migrated it: upgrade
    └── StoreError                 the database failed or could not be reached
        └── StoreUnavailableError  could not connect (or lost the connection)
            └── StoreConflictError rolled back for a concurrent one: safe to retry

Two signals stop a running handler at a safe point (`ctx.checkpoint`,
`ctx.progress`, `ctx.raise_if_cancelled`). They derive from BaseException, like
`asyncio.CancelledError`, so an `except Exception:` in the handler does not
swallow them, while its `finally:` blocks still run::

    JobCancelled                   someone cancelled the job: it ends cancelled
    LeaseLost                      another attempt may hold the job: write nothing

Errors of bad input are also a `ValueError` (or a `TypeError`, for arguments),
so code that guards a call with the built-in exceptions keeps working.
Driver errors (psycopg, sqlite3) never escape the store: they are translated
to `StoreError` with the original chained as `__cause__`.
"""

from __future__ import annotations


class DueError(Exception):
    """Base class of every error raised by `due`."""


class ConfigurationError(DueError, ValueError):
    """A URL, option or task definition is invalid."""


class InvalidJobError(DueError, ValueError):
    """An enqueue request was rejected before anything was written."""


class UnknownTaskError(InvalidJobError, LookupError):
    """No task is registered under the given name."""


class ArgumentsError(InvalidJobError, TypeError):
    """The arguments do not match the task function's signature."""


class PayloadError(InvalidJobError):
    """The arguments cannot be stored: not JSON-serialisable, or too large."""


class JobNotFoundError(DueError, LookupError):
    """No job exists with the given id."""


class ScheduleNotFoundError(DueError, LookupError):
    """No schedule exists with the given name."""


class InvalidStateError(DueError):
    """The job's current state does not allow the requested action."""


class SchemaError(DueError):
    """The database schema does not match what this version of `due` knows."""


class NotMigratedError(SchemaError):
    """The database has no `due` schema (or an incomplete one)."""


class SchemaTooNewError(SchemaError):
    """The database was migrated by a newer version of `due`."""


class StoreError(DueError):
    """The database reported an error."""


class StoreUnavailableError(StoreError):
    """The database could not be reached."""


class StoreConflictError(StoreUnavailableError):
    """The database rolled this transaction back: nothing was written, trying again is safe.

    It did so because of a concurrent transaction (a deadlock, a serialization
    failure), or it ended a session left idle inside a transaction.
    """


class JobCancelled(BaseException):
    """Raised at a safe point of a job whose cancellation was requested."""


class LeaseLost(BaseException):
    """Raised at a safe point of a job whose lease this worker no longer holds."""


def class_path(error: BaseException) -> str:
    """The class of an exception as `module.QualName` (`builtins.ValueError`).

    Args:
        error: The exception.

    Returns:
        Where its class is defined, importable by that path (a nested class
        aside).
    """
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"
