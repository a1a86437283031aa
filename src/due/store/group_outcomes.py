"""What each caller of a group of one-job enqueues gets, from how the group's
write ended: the rules the coroutines' groups (enqueue_groups.py) and the
threads' (thread_groups.py) share, each over its own way of waiting.

- The write refused (StatementRefused) wrote nothing: each request is made
  alone, so a bad request fails only its own caller; a request refused alone
  gets that refusal.
- A row the write committed without (a trigger of the user's skipped it)
  fails its own caller; the others have their jobs.
- Any other error may have come after the commit: every caller gets it, and
  nothing is sent again. Each caller gets an exception object of its own
  when it is one of due's (raised in several threads, one object's traceback
  would be spliced from all of theirs).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from due.core.jobs import Job
from due.errors import DueError
from due.store.backend import StatementRefused

Outcome = Job | BaseException | None
"""A caller's job, its error, or None: make the request alone."""


def group_outcomes(
    size: int,
    created: Sequence[Job | StatementRefused] | None,
    error: Exception | None = None,
) -> list[Outcome]:
    """Each of `size` requests' outcome, in order. `created`: the write's
    result (a job or the row's own refusal per request; None: the write could
    not be made, so each alone); `error`: what the write raised instead."""
    if isinstance(error, StatementRefused):
        return [error] if size == 1 else [None] * size
    if error is not None:
        return [error, *(_own_copy(error) for _ in range(size - 1))]
    if created is None:
        return [None] * size
    return list(created)


def _own_copy(error: Exception) -> Exception:
    """The same error (type, message, cause, notes) as an object of its own;
    the error itself when it cannot be copied. Only due's own errors (the
    stores turn every driver's error into one): copying a psycopg error
    empties the original's connection and result (its __reduce__ writes into
    the original's __dict__)."""
    if not isinstance(error, DueError):
        return error
    try:
        mine = copy.copy(error)
    except Exception:
        return error
    if type(mine) is not type(error) or mine.args != error.args:
        return error
    mine.__cause__ = error.__cause__
    mine.__context__ = error.__context__
    mine.__suppress_context__ = error.__suppress_context__
    if hasattr(error, "__notes__"):
        mine.__notes__ = list(error.__notes__)
    return mine.with_traceback(error.__traceback__)
