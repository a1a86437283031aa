"""One-job enqueues made side by side on an event loop, written together.

On PostgreSQL `await task.aenqueue(...)` sends its one statement from its
event loop, on the store's connection of that loop
(postgres/loop_connections.py). The other coroutines of the loop that enqueue
while that statement runs (the requests a web server handles side by side)
each took a thread, a pooled connection and a commit of their own. Now they
wait for it instead, and the next statement writes all of them: one round
trip and one commit for the group, each caller given its own job.

What a caller can count on is what it had alone:

- its job is created once, or it gets an error;
- a statement the server refused (one request's row breaking a constraint of
  the user's, say) wrote nothing: every request of that group is then made
  alone, on a thread, so a bad request fails only its own caller; a row the
  statement committed without (a trigger of the user's skipped it) fails its
  own caller, and the others have their jobs; any other
  error (an outage, one the client met reading the reply, a failed commit)
  may have come after the commit, so it goes to every caller of the group
  and nothing is sent again (group_outcomes.py holds these rules);
- a caller cancelled while it waits is taken out of its group, and its job is
  not created; one cancelled while its group's statement runs may find its
  job created, as a caller cancelled during a statement of its own may.

On SQLite, where `aenqueue` has always taken a thread, the group is written
the same way in one transaction on one thread (jobs.enqueue_together): one
commit, and one fsync, for all.

Only one-job enqueues without a key are grouped (a key is settled row by row:
steps.py); on PostgreSQL, only where the loop has the store's connection to
use. Any other enqueue takes the thread path, as before.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from due.core.jobs import Job
from due.core.records import NewJob
from due.errors import StoreUnavailableError
from due.store.backend import StatementRefused
from due.store.group_outcomes import group_outcomes

MAX_GROUP = 500
"""Requests in one statement at most (a bigger crowd is written in turns)."""

Write = Callable[[Sequence[NewJob]], Awaitable[list[Job | StatementRefused] | None]]
"""Writes jobs in one statement from the running loop: each request's job, or the
error its caller gets; None: it cannot (take a thread)."""

_Waiting = tuple[NewJob, "asyncio.Future[Job | None]"]


@dataclass
class _Group:
    writing: bool = False
    """A statement of this loop's enqueues is under way."""
    waiting: list[_Waiting] = field(default_factory=list)


class EnqueueGroups:
    def __init__(self, write: Write, most: int = MAX_GROUP) -> None:
        self._write = write
        self._most = most
        self._groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Group] = (
            weakref.WeakKeyDictionary()
        )
        self._writers: set[asyncio.Task[None]] = set()
        """Tasks writing waiting requests (kept: the loop holds tasks weakly)."""

    async def enqueue(self, job: NewJob) -> Job | None:
        """The job created, or None: make it on a thread instead."""
        loop = asyncio.get_running_loop()
        group = self._groups.get(loop)
        if group is None:
            group = self._groups[loop] = _Group()
        if group.writing:
            answer: asyncio.Future[Job | None] = loop.create_future()
            group.waiting.append((job, answer))
            return await answer  # a caller cancelled here cancels `answer`: it is skipped
        group.writing = True  # alone (the usual case): written at once, with no task
        try:
            created = await self._write([job])
        finally:
            self._next(group, loop)
        if created is None:
            return None
        if isinstance(created[0], Exception):
            raise created[0]
        return created[0]

    def _next(self, group: _Group, loop: asyncio.AbstractEventLoop) -> None:
        """After a statement: those who waited for it are written next, by a task
        of their own (the caller whose statement ended returns at once)."""
        if not group.waiting:
            group.writing = False
            return
        writer = loop.create_task(self._write_waiting(group))
        self._writers.add(writer)
        writer.add_done_callback(self._writers.discard)

    async def _write_waiting(self, group: _Group) -> None:
        batch: list[_Waiting] = []
        try:
            while group.waiting:
                batch = [w for w in group.waiting[: self._most] if not w[1].done()]
                del group.waiting[: self._most]
                if batch:
                    await self._write_group(batch)
                batch = []
        except BaseException:  # this task cancelled (its loop is closing)
            interrupted = StoreUnavailableError(
                "the enqueue was interrupted while its statement ran (its event loop "
                "closing?): the job may or may not have been created"
            )
            for _, answer in batch:  # sent: whether it committed is unknown
                _fail(answer, interrupted)
            for _, answer in group.waiting:  # not sent: each makes its own
                _answer(answer, None)
            group.waiting.clear()
            raise
        finally:
            group.writing = False

    async def _write_group(self, batch: list[_Waiting]) -> None:
        created: list[Job | StatementRefused] | None = None
        failed: Exception | None = None
        try:
            created = await self._write([job for job, _ in batch])
        except Exception as error:
            failed = error
        outcomes = group_outcomes(len(batch), created, failed)
        for (_, answer), outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                _fail(answer, outcome)
            else:
                _answer(answer, outcome)  # None: made alone, on a thread


def _answer(answer: asyncio.Future[Job | None], job: Job | None) -> None:
    if not answer.done():  # its caller may have been cancelled meanwhile
        answer.set_result(job)


def _fail(answer: asyncio.Future[Job | None], error: BaseException) -> None:
    if not answer.done():
        answer.set_exception(error)
