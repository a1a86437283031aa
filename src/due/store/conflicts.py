"""A transaction the database rolled back for a concurrent one is run again.

PostgreSQL may end one of two transactions that wait on each other (a
deadlock between settling pieces and cancelling their parent, say) or a
session an administrator ended: nothing was written, so running it again is
the usual remedy, and safe. (SQLite never raises StoreConflictError: its one
writer at a time cannot deadlock.)
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from due.errors import StoreConflictError

CONFLICT_RETRIES = 5
F = TypeVar("F", bound=Callable[..., Any])


def retried_on_conflict(operation: F) -> F:
    @functools.wraps(operation)
    def again(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(CONFLICT_RETRIES):
            try:
                return operation(*args, **kwargs)
            except StoreConflictError:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                # Jittered, so the two transactions do not meet again.
                time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
        raise AssertionError("unreachable")

    return again  # type: ignore[return-value]
