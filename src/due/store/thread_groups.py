"""One-job enqueues made side by side by threads, written together.

A threaded web server's requests each call `task.enqueue(...)`. Alone, each
paid a commit of its own: on SQLite one writer at a time and one fsync each,
so 8 threads made fewer jobs a second than one (2,530 against 2,923 here);
on PostgreSQL a pooled connection, a round trip and a commit each. Now the
requests that come while another thread's enqueue is being written wait for
it, and the first of them writes them all in one statement or transaction:
one commit for the group, each caller given its own job. A thread alone
(the usual case) writes at once, as before.

What a caller can count on is what it had alone, as for the coroutines of a
loop (enqueue_groups.py):

- its job is created once, or it gets an error;
- a group the database refused wrote nothing (its transaction rolled back,
  or its one statement failed): every request of it is then made alone, each
  by its own thread, so a bad request fails only its own caller; a row the
  statement committed without (a trigger of the user's skipped it) fails its
  own caller, and the others have their jobs;
- any other error (an outage, a failed commit) may have come after the
  commit, so it goes to every caller of the group and nothing is sent again
  (group_outcomes.py holds these rules).

Only one-job enqueues without a key, and without a connection of the
caller's, are grouped (a key is settled row by row: steps.py).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from due.core.jobs import Job
from due.core.records import NewJob
from due.errors import StoreUnavailableError
from due.store.backend import StatementRefused
from due.store.group_outcomes import group_outcomes

MAX_GROUP = 500
"""Requests written together at most (a bigger crowd is written in turns)."""

Write = Callable[[Sequence[NewJob]], list[Job | StatementRefused]]
"""Writes jobs in one transaction: each request's job, or the error its caller
gets; raises StatementRefused when the group was refused and nothing written."""


@dataclass(eq=False)
class _Request:
    job: NewJob
    taken: bool = False
    """In a group being written (its job may be written from then on)."""
    done: bool = False
    outcome: Job | BaseException | None = None
    """The job, the caller's error, or None: write it alone."""
    ready: threading.Event | None = None
    """Set when it is settled or first in line; only for a request that came
    behind another (one alone, the usual case, never waits: no Event made)."""

    def wake(self) -> None:
        if self.ready is not None:
            self.ready.set()


class ThreadGroups:
    def __init__(self, write: Write, most: int = MAX_GROUP) -> None:
        self._write = write
        self._most = most
        self._lock = threading.Lock()
        self._line: deque[_Request] = deque()
        """Requests in the order they came; the first one's thread writes."""
        _ALL.add(self)

    def _forget_in_child(self) -> None:
        """A child process forked while threads of its parent were in line has
        none of those threads: its first enqueue must not wait behind them."""
        self._lock = threading.Lock()
        self._line = deque()

    @property
    def in_line(self) -> int:
        """Requests being written or waiting to be."""
        return len(self._line)

    @property
    def being_written(self) -> int:
        """Requests of the group being written (0: none is)."""
        return sum(request.taken for request in self._line)

    def enqueue(self, job: NewJob) -> Job | None:
        """The job created, or None: write it alone instead."""
        request = _Request(job)
        with self._lock:
            if self._line:
                request.ready = threading.Event()
            self._line.append(request)
        group: list[_Request] = []
        try:
            if request.ready is not None:
                request.ready.wait()  # written by the first, or first in line now
                if request.done:
                    return _outcome(request)
            with self._lock:
                group = [self._line[i] for i in range(min(self._most, len(self._line)))]
                for member in group:
                    member.taken = True
            self._write_group(group)
        except BaseException:
            if not group:  # interrupted in line (KeyboardInterrupt, a timeout's exception)
                self._leave(request)
            raise
        finally:
            if group:
                self._written(group)
        return _outcome(request)

    def _leave(self, request: _Request) -> None:
        """A caller interrupted while in line leaves it, its job not written; if
        it was first, the next one writes. One already taken into a group stays:
        its job may be written, as a caller's interrupted during its own
        statement may be."""
        with self._lock:
            if request.taken:
                return
            first = self._line[0] is request
            self._line.remove(request)
            if first and self._line:
                self._line[0].wake()

    def _written(self, group: list[_Request]) -> None:
        """The group out of the line, each request settled, and the next first."""
        with self._lock:
            for _ in group:
                self._line.popleft()
            for written in group:
                if not written.done:  # this thread was interrupted while writing
                    _settle(written, _interrupted())
            if self._line:
                self._line[0].wake()  # the next in line writes

    def _write_group(self, group: list[_Request]) -> None:
        created: list[Job | StatementRefused] | None = None
        failed: Exception | None = None
        try:
            created = self._write([request.job for request in group])
        except Exception as error:
            failed = error
        outcomes = group_outcomes(len(group), created, failed)
        for request, outcome in zip(group, outcomes, strict=True):
            _settle(request, outcome)


_ALL: weakref.WeakSet[ThreadGroups] = weakref.WeakSet()


def _forget_all_in_child() -> None:
    for groups in _ALL:
        groups._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_all_in_child)


def _settle(request: _Request, outcome: Job | BaseException | None) -> None:
    request.outcome = outcome
    request.done = True
    request.wake()


def _outcome(request: _Request) -> Job | None:
    if isinstance(request.outcome, BaseException):
        raise request.outcome
    return request.outcome


def _interrupted() -> StoreUnavailableError:
    return StoreUnavailableError(
        "the enqueue was interrupted while its group was written (the thread writing "
        "it was stopped): the job may or may not have been created"
    )
