"""One bad row never holds a batch hostage.

Acknowledgements and heartbeats are written many jobs to a statement. Values
are checked where they are produced (payload.py), but should a batch still
fail for what one row holds — a value the database refuses — the other jobs
must not lose their leases or stay running because of it. So a batch that
fails for what its rows hold (`row_fault`: a value the database refused, one
the driver could not encode, or any error that is not the database's) is
written again one row at a time; a row that fails on its own is written once
more stripped of its details (result, progress, error text), with the reason,
so its job still ends as it did. A failure that is the database's (an outage,
a statement timeout, a full disk) is no row's fault: the batch is kept whole
and the caller tries it again, details and all.

A row that cannot be written even stripped (which no known value does) is
given up, logged at ERROR: its job keeps its lease until it expires and is
rescued, and every other job of the batch is written.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from due.core.jobs import AttemptError, JobState
from due.core.records import Completion, HeartbeatReply, Lease
from due.errors import StoreError
from due.logs import event
from due.payload import encode_value, storable_text
from due.store.backend import ValueRefused

log = logging.getLogger("due.store")
ATTEMPT_KINDS = ("error", "timeout", "lease_lost", "unknown_task", "cancelled")


def row_fault(error: BaseException) -> bool:
    """Whether a batch's failure may be the fault of what one of its rows holds:
    a value refused (ValueRefused), or an error that is not the database's at
    all (the driver choked on a value before sending it, a value our own code
    could not convert). Not an outage, a statement timeout or a full disk."""
    if isinstance(error, StoreError):
        return isinstance(error, ValueRefused)
    return isinstance(error, Exception)


def complete_each(
    write: Callable[[Sequence[Completion]], set[int]], completions: Sequence[Completion]
) -> set[int]:
    """`write(completions)`, falling back to one completion at a time."""
    try:
        return write(completions)
    except Exception as error:
        if not row_fault(error):
            raise
        if len(completions) == 1:
            return _write_stripped(write, completions[0], error)
    applied: set[int] = set()
    for completion in completions:
        applied |= complete_each(write, [completion])
    return applied


def _write_stripped(
    write: Callable[[Sequence[Completion]], set[int]], completion: Completion, error: Exception
) -> set[int]:
    event(log, "job.outcome_refused", logging.ERROR, job=completion.job_id, error=_text(error))
    try:
        return write([stripped(completion, error)])
    except Exception as again:
        if not row_fault(again):
            raise
        event(
            log,
            "job.outcome_unwritable",
            logging.ERROR,
            job=completion.job_id,
            error=_text(again),
            note="its lease will expire and it will be rescued",
        )
        return set()


def stripped(completion: Completion, error: Exception) -> Completion:
    """The same end, without the details the database refused, and with the reason."""
    reason = f"the database refused this attempt's details, which were dropped: {_text(error)}"
    if completion.state == JobState.SUCCEEDED:
        result = encode_value({"unstorable_result": storable_text(reason)}, "result")
        return dataclasses.replace(completion, result=result, progress=None)
    kept = completion.error
    record = AttemptError(
        attempt=kept.attempt if kept and type(kept.attempt) is int else 0,
        error=storable_text(reason),
        traceback=None,
        at=kept.at if kept and isinstance(kept.at, datetime) else None,
        kind=kept.kind if kept and kept.kind in ATTEMPT_KINDS else "error",
        worker=kept.worker if kept and isinstance(kept.worker, str) else None,
    )
    return dataclasses.replace(completion, result=None, progress=None, error=record)


def heartbeat_each(
    write: Callable[[Sequence[Lease]], HeartbeatReply], leases: Sequence[Lease]
) -> HeartbeatReply:
    """`write(leases)`, falling back to one lease at a time, and to a lease without
    its progress when that is what the database refuses."""
    try:
        return write(leases)
    except Exception as error:
        if not row_fault(error):
            raise
    extended: set[int] = set()
    lost: set[int] = set()
    cancel: set[int] = set()
    for lease in leases:
        try:
            reply = write([lease])
        except Exception as error:
            if not row_fault(error) or lease.progress is None:
                raise
            event(log, "job.progress_refused", logging.ERROR, job=lease.job_id, error=_text(error))
            reply = write([dataclasses.replace(lease, progress=None)])
        extended |= reply.extended
        lost |= reply.lost
        cancel |= reply.cancel_requested
    return HeartbeatReply(frozenset(extended), frozenset(lost), frozenset(cancel))


def _text(error: BaseException) -> str:
    """A refusal's text for the job's record and the log (storable: the error may
    quote the very value that could not be stored)."""
    text = str(error) if isinstance(error, StoreError) else f"{type(error).__name__}: {error}"
    return storable_text(text, 2000)
