"""Waiting for jobs to end: `app.wait(job_id)` and `await app.await_job(job_id)`.

One watcher thread per App serves every waiter, sync or async. It sleeps on
the store's feed of endings — on PostgreSQL a notification that the ending
transaction sends (channel `due_ended`, its schema's), on SQLite any commit by another
connection (`PRAGMA data_version`) — and then reads, in one query, which of the
jobs waited for have ended. It also looks every `RECHECK_SECONDS` without
being woken, so a notification lost while its connection was renewed delays
an answer, never loses it. No waiter polls the job table on its own.

A waiter is registered before the job is first read, so a job that ends in
between is seen by the watcher: nothing can be missed. Timeouts are real
seconds (not the app's clock: a FakeClock does not make a wait end sooner).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from due.clock import SystemClock
from due.core.jobs import Job
from due.errors import StoreError
from due.logs import event

if TYPE_CHECKING:
    from due.store import Store
    from due.store.backend import ChangeFeed

log = logging.getLogger("due.wait")
RECHECK_SECONDS = 2.0
LISTEN_SECONDS = 0.2
"""How long one wait on the feed lasts: the watcher looks at `close()` between two."""
RETRY_SECONDS = 0.5
_REAL_CLOCK = SystemClock()


class JobWaiter:
    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._waiters: dict[int, list[concurrent.futures.Future[Job]]] = {}
        self._someone_waits = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False

    def wait(self, job_id: int, timeout: float | None) -> Job:
        """The job once it has ended; TimeoutError naming its state otherwise."""
        future = self._register(job_id)
        try:
            self._resolve_if_ended(job_id, future)
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise self._timed_out(job_id, timeout) from None
        finally:
            self._unregister(job_id, future)

    async def await_job(self, job_id: int, timeout: float | None) -> Job:
        future = self._register(job_id)
        try:
            await asyncio.to_thread(self._resolve_if_ended, job_id, future)
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            raise await asyncio.to_thread(self._timed_out, job_id, timeout) from None
        finally:
            self._unregister(job_id, future)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._someone_waits.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=LISTEN_SECONDS + 1)
            self._thread = None

    # --- waiters ---------------------------------------------------------------

    def _register(self, job_id: int) -> concurrent.futures.Future[Job]:
        future: concurrent.futures.Future[Job] = concurrent.futures.Future()
        with self._lock:
            self._waiters.setdefault(job_id, []).append(future)
            if self._thread is None:
                self._closed = False
                self._thread = threading.Thread(
                    target=self._watch, name="due-job-waiter", daemon=True
                )
                self._thread.start()
            self._someone_waits.notify_all()
        return future

    def _unregister(self, job_id: int, future: concurrent.futures.Future[Job]) -> None:
        with self._lock:
            waiting = self._waiters.get(job_id, [])
            if future in waiting:
                waiting.remove(future)
            if not waiting:
                self._waiters.pop(job_id, None)

    def _resolve_if_ended(self, job_id: int, future: concurrent.futures.Future[Job]) -> None:
        job = self._store().job_get(job_id)  # JobNotFoundError for a job that does not exist
        if job.is_final and not future.done():
            future.set_result(job)

    def _timed_out(self, job_id: int, timeout: float | None) -> TimeoutError:
        job = self._store().job_get(job_id)
        return TimeoutError(
            f"job {job_id} ({job.task}) has not ended within {timeout:g}s: it is {job.state}"
        )

    # --- the watcher thread -------------------------------------------------------

    def _watch(self) -> None:
        feed: ChangeFeed | None = None
        checked = float("-inf")
        try:
            while self._wait_for_waiters():
                try:
                    feed = feed or self._store().watch_endings()
                    changed = feed.wait(LISTEN_SECONDS)
                    if changed or _REAL_CLOCK.monotonic() - checked >= RECHECK_SECONDS:
                        checked = _REAL_CLOCK.monotonic()
                        self._deliver()
                except StoreError as error:
                    event(log, "wait.store_error", logging.WARNING, error=str(error))
                    if feed is not None:
                        feed.close()
                        feed = None
                    with self._lock:
                        self._someone_waits.wait(RETRY_SECONDS)
        finally:
            if feed is not None:
                feed.close()

    def _wait_for_waiters(self) -> bool:
        with self._lock:
            while not self._waiters and not self._closed:
                self._someone_waits.wait()
            return not self._closed

    def _deliver(self) -> None:
        with self._lock:
            ids = list(self._waiters)
        if not ids:
            return
        for job in self._store().job_ended(ids):
            with self._lock:
                futures = list(self._waiters.get(job.id, ()))
            for future in futures:
                if not future.done():
                    future.set_result(job)
