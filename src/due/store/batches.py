"""One bad row never holds a batch hostage.

Acknowledgements and heartbeats are written many jobs to a statement. Values
are checked where they are produced (payload.py), but should a batch still
fail for what one row holds — a value the database refuses — the other jobs
must not lose their leases or stay running because of it. So a batch that
fails with the database's refusal (not with an outage: that is retried as a
whole by the caller) is written again one row at a time; a row that fails on
its own is written once more stripped of its details (result, progress, error
text), with the reason, so its job still ends as it did.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from due.core.jobs import AttemptError, JobState
from due.core.records import Completion, HeartbeatReply, Lease
from due.errors import StoreError, StoreUnavailableError
from due.logs import event
from due.payload import encode_value, storable_text

log = logging.getLogger("due.store")
ATTEMPT_KINDS = ("error", "timeout", "lease_lost", "unknown_task", "cancelled")


def refused(error: StoreError) -> bool:
    """The database refused what was sent (as opposed to being out of reach)."""
    return not isinstance(error, StoreUnavailableError)


def complete_each(
    write: Callable[[Sequence[Completion]], set[int]], completions: Sequence[Completion]
) -> set[int]:
    """`write(completions)`, falling back to one completion at a time."""
    try:
        return write(completions)
    except StoreError as error:
        if not refused(error):
            raise
        if len(completions) == 1:
            (completion,) = completions
            event(
                log, "job.outcome_refused", logging.ERROR, job=completion.job_id, error=str(error)
            )
            return write([stripped(completion, error)])
    applied: set[int] = set()
    for completion in completions:
        applied |= complete_each(write, [completion])
    return applied


def stripped(completion: Completion, error: StoreError) -> Completion:
    """The same end, without the details the database refused, and with the reason."""
    reason = f"the database refused this attempt's details, which were dropped: {error}"
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
    )
    return dataclasses.replace(completion, result=None, progress=None, error=record)


def heartbeat_each(
    write: Callable[[Sequence[Lease]], HeartbeatReply], leases: Sequence[Lease]
) -> HeartbeatReply:
    """`write(leases)`, falling back to one lease at a time, and to a lease without
    its progress when that is what the database refuses."""
    try:
        return write(leases)
    except StoreError as error:
        if not refused(error):
            raise
    extended: set[int] = set()
    lost: set[int] = set()
    cancel: set[int] = set()
    for lease in leases:
        try:
            reply = write([lease])
        except StoreError as error:
            if not refused(error) or lease.progress is None:
                raise
            event(log, "job.progress_refused", logging.ERROR, job=lease.job_id, error=str(error))
            reply = write([dataclasses.replace(lease, progress=None)])
        extended |= reply.extended
        lost |= reply.lost
        cancel |= reply.cancel_requested
    return HeartbeatReply(frozenset(extended), frozenset(lost), frozenset(cancel))
