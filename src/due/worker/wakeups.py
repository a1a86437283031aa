"""Wake-ups: how an idle worker learns at once that a job is there.

The store's job feed (`Store.watch_jobs`) says it. PostgreSQL: a dedicated
connection LISTENs on `due_jobs` (its schema's: the name carries the schema
unless it is public); every statement that makes a job claimable
notifies with '<queue> <run_at epoch>' in its own transaction, so the
notification arrives exactly when the job is visible, except a single
enqueue on due's own session, whose wake-up follows its commit in the same
round trip (store/postgres/woken_apart.py: notifying commits are taken one
at a time, and many web processes' enqueues waited for each other). SQLite: a commit that
makes a job claimable rings the workers' doorbells (a Unix datagram socket
each, in a folder beside the database file: store/sqlite/doorbell.py) once it
has returned, and `PRAGMA data_version`, which changes whenever another
connection commits, is read then, and every few milliseconds for the commits
that ring nothing (a job in the caller's own transaction); either way an
empty message: every queue looks.
On PostgreSQL the same channel carries '!cancel <job id>' when a running job
is asked to stop, so it hears at once rather than at its next heartbeat
(which carries the request too, on either store). Either way a worker also
polls on a slow interval, so a lost wake-up delays a job, never loses it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from due.errors import StoreError
from due.logs import event

log = logging.getLogger("due.worker")
RECONNECT_MAX_SECONDS = 5.0

OnDue = Callable[[str, datetime | None], None]
"""Called on the event loop with a queue (or "" for all) and when its job is due."""
OnCancel = Callable[[int], None]
"""Called on the event loop with a job asked to stop."""
CANCEL_PREFIX = "!cancel "


class Wakeups:
    """Runs a listener thread that calls `on_due` on the event loop."""

    def __init__(
        self,
        store: Any,
        loop: asyncio.AbstractEventLoop,
        on_due: OnDue,
        on_cancel: OnCancel | None = None,
    ) -> None:
        self._store = store
        self._loop = loop
        self._on_due = on_due
        self._on_cancel = on_cancel
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="due-wakeups", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _signal(self, queue: str, run_at: datetime | None) -> None:
        if not self._stop.is_set():
            self._loop.call_soon_threadsafe(self._on_due, queue, run_at)

    def _cancel(self, job_id: str) -> None:
        if self._on_cancel is not None and job_id.isdigit() and not self._stop.is_set():
            self._loop.call_soon_threadsafe(self._on_cancel, int(job_id))

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                self._listen()
                backoff = 0.1
            except StoreError as error:
                event(
                    log, "worker.wakeups_lost", logging.WARNING, error=str(error), retry_in=backoff
                )
            except Exception as error:  # a driver error outside the store's translation
                event(
                    log, "worker.wakeups_lost", logging.WARNING, error=repr(error), retry_in=backoff
                )
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, RECONNECT_MAX_SECONDS)
            self._signal("", None)  # we may have missed some: every queue looks again

    def _listen(self) -> None:
        feed = self._store.watch_jobs()
        try:
            while not self._stop.is_set():
                for message in feed.messages(timeout=0.5):
                    if message.startswith(CANCEL_PREFIX):
                        self._cancel(message.removeprefix(CANCEL_PREFIX))
                    else:
                        queue, run_at = parse_payload(message)
                        self._signal(queue, run_at)
        finally:
            feed.close()


def parse_payload(payload: str) -> tuple[str, datetime | None]:
    queue, _, epoch = payload.partition(" ")
    try:
        return queue, datetime.fromtimestamp(float(epoch), UTC)
    except ValueError:
        return queue, None
