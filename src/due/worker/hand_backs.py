"""Jobs the worker claimed and hands back unstarted, their attempt not spent.

- A job of a rate whose handler was too late to begin. A rate counts a job's
  start at its claim, and its handler must begin within the rate's tolerance
  of that instant (core/limits.py): one that began later could crowd the next
  window as the service it calls sees it. The runner does not begin it; it is
  handed back at once, rather than when its lease would expire. Its counted
  start stays counted: the window only holds fewer. Seen under faults (a
  claim's reply held up, a paused process), rarely otherwise.
- A job stored as counting against no limit whose task, in this worker's
  code, counts against some: a run of a schedule stored before its task had
  limits, a job enqueued by code older than the limits. It counts against
  its task's limits as this worker knows them: they are written on it (its
  keys computed from its arguments, as an enqueue would have), and it is
  handed back, to be claimed again within them.
- A job on its last attempt whose start was recorded (a last attempt's is,
  before its handler begins) but whose handler did not begin: the record's
  reply came back after its lease stopped being trusted (a server slow to
  answer, or shutting down). Only a start that ran is an attempt
  (invariant 12): handed back now, rather than left for a rescue to count
  an attempt that never ran. Should another worker have taken the job, or a
  rescue ended it meanwhile, the fenced release changes nothing.

Each is said at WARNING, and the reason is in the job's history.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Coroutine
from typing import Any

from due.errors import StoreError
from due.logs import event
from due.service import Calls
from due.store import Store
from due.worker.running import RunningJob

log = logging.getLogger("due.worker")
TOO_LATE = "handed back unstarted: its handler could not begin in time for its rate limit"
LIMITED_NOW = "handed back unstarted: its task counts against limits, written on it now"
UNBEGUN = (
    "handed back unstarted: its start was recorded, but its lease was no longer trusted "
    "when it was to begin"
)


class HandBacks:
    def __init__(self, *, store: Store, call: Calls) -> None:
        self._store = store
        self._call = call
        self._releasing: set[asyncio.Task[None]] = set()

    def too_late(self, running: RunningJob) -> None:
        job = running.job
        event(log, "job.start_too_late", logging.WARNING, job=job.id, task=job.task)
        self._start(self._release(running, TOO_LATE, None))

    def limited_now(self, running: RunningJob, limits: str) -> None:
        job = running.job
        event(log, "job.limits_written", logging.WARNING, job=job.id, task=job.task, limits=limits)
        self._start(self._release(running, LIMITED_NOW, limits))

    def unbegun(self, running: RunningJob) -> None:
        job = running.job
        event(log, "job.start_not_begun", logging.WARNING, job=job.id, task=job.task)
        self._start(self._release(running, UNBEGUN, None))

    def _start(self, release: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(release)
        self._releasing.add(task)  # (a task only the loop refers to may be collected)
        task.add_done_callback(self._releasing.discard)

    async def _release(self, running: RunningJob, reason: str, limits: str | None) -> None:
        release = functools.partial(
            self._store.job_release,
            limits={running.job.id: limits} if limits is not None else None,
        )
        try:
            await self._call(release, [running.lease], reason)
        except StoreError as error:
            event(
                log,
                "job.hand_back_failed",
                logging.WARNING,
                job=running.job.id,
                error=str(error),
                note="it is due again once its lease expires, its attempt not spent",
            )
