"""What the calls that look at or act on stored jobs take (job ids, and the
limits of lists), checked before the store is asked, so both stores answer
alike: SQLite raised OverflowError for an id past 64 bits where PostgreSQL
said "no job", and a negative limit listed every job on SQLite where
PostgreSQL refused the statement.
"""

from __future__ import annotations

import operator
from typing import Any

from due.errors import ConfigurationError, JobNotFoundError
from due.payload import unstorable

MAX_ID = 2**63 - 1
"""Ids are 64-bit on both stores (SQLite's INTEGER, PostgreSQL's bigint)."""


def job_id(value: Any) -> int:
    """The id of a job to look at or act on: JobNotFoundError when no job can
    have it, ConfigurationError (a ValueError) when it is not a whole number."""
    number = _whole(value, "a job id")
    if not 1 <= number <= MAX_ID:
        raise JobNotFoundError(f"no job with id {number}")
    return number


def id_filter(value: Any, what: str) -> int | None:
    """An id that filters a list (`parent=`, `before=`): past 64 bits it is the
    nearest 64-bit one, which filters alike (no job has either)."""
    if value is None:
        return None
    return max(-MAX_ID - 1, min(MAX_ID, _whole(value, what)))


def can_match(*texts: str | None) -> bool:
    """Whether a stored name could equal each of `texts` (a search box may send
    a NUL: PostgreSQL refused the statement, SQLite found nothing)."""
    return all(text is None or unstorable(str(text)) is None for text in texts)


def list_limit(value: Any, what: str = "limit") -> int:
    """How many rows a list may hold: a whole number, 0 or more (past 64 bits: all)."""
    number = _whole(value, what)
    if number < 0:
        raise ConfigurationError(f"{what}={number} is negative; give how many to list, 0 or more")
    return min(number, MAX_ID)


def _whole(value: Any, what: str) -> int:
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
        if isinstance(value, str):
            try:
                return int(value.strip())  # an id read from a form or a command line
            except ValueError:
                pass
    raise ConfigurationError(f"{what} must be a whole number, got {value!r:.40}")
