"""Writers of several processes take the file's write lock in turn, woken at once.

SQLite's write lock is taken by trying: a process that finds it held sleeps
and tries again (`SQLiteBackend._begin_immediate`: about every millisecond).
With several web server processes enqueueing at once, the lock then sat free
between one writer's commit and the next one's try, and the tries themselves
cost the crowded CPU: 8 processes made fewer jobs a second than one
(bench/web_enqueue.py, bench/NOTES.md). So due's writers first wait their turn
on a lock the kernel hands on: an fcntl lock on a file beside the database
(`<database>-due-writers`, created on the first write). The kernel wakes the
next waiter the instant the holder lets go, and frees the turn of a process
that dies, so a killed writer never blocks the others.

The turn is an optimisation only: SQLite's own lock still decides who writes,
so a writer that takes no turn (another due version, the sqlite3 shell, a
caller's own connection) is waited for as before, and a file that cannot be
opened (a read-only folder), or that is not what due makes (beside.py: a
symbolic link, another user's file, one others may read), leaves due's
writers trying as before.

A turn is held for one write transaction, milliseconds. A process frozen
while it holds one (SIGSTOP, a paused container, a debugger) would make every
other process's writes wait for it, so a writer waits for its turn a tenth
of its busy timeout, a second at most (`turn_wait`), then writes without it:
SQLite's lock decides, as for a writer that takes no turn (a frozen process
holding *that* lock stalls every writer until its busy timeout, turns or
none). The first writer of a process to give up logs which process holds the
turn (`store.writer_turn_held`, from /proc/locks on Linux), and its writers go
without turns until the turn comes (`store.writer_turn_freed`): one frozen
process costs each other process one wait, not one a write.

The kernel's wait has no timeout, so a helper thread of the process waits in
it while the writer waits on an event; a turn that comes after the writer
gave up is handed straight back.
fcntl locks belong to the process: one writer thread of a process holds its
turn at a time (the process's writer lock, taken first), a forked child has
none of its parent's, and nothing else of the process may open and close the
file (closing any descriptor of it would drop the process's turn).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from pathlib import Path

from due.clock import SystemClock
from due.logs import event
from due.store.sqlite import beside

SUFFIX = "-due-writers"
MAX_TURN_WAIT = 1.0
TURN_WAIT_SHARE = 0.1
"""A writer waits for its turn this share of its busy timeout, MAX_TURN_WAIT
seconds at most: a turn held longer is held by a process that is frozen, or
in a write of that length, whose lock SQLite's own wait takes over."""
log = logging.getLogger("due.store")
_CLOCK = SystemClock()


def turn_wait(busy_timeout: float) -> float:
    """How long a writer with this busy timeout waits for its turn."""
    return min(MAX_TURN_WAIT, busy_timeout * TURN_WAIT_SHARE)


class WriterTurns:
    """This process's turns at one database file's write lock."""

    def __init__(self, database: str) -> None:
        self.path = database + SUFFIX
        self._guard = threading.Lock()
        self._changed = threading.Condition(self._guard)
        self._fd: int | None = None
        self._unusable = False
        self._held = False
        self._pending: _Request | None = None
        """The turn the helper is waiting for (None: it waits for none)."""
        self._helper: threading.Thread | None = None
        self._stalled_since: float | None = None
        """When a writer gave up waiting for the turn the helper still waits
        for (None: no stall). Until the turn comes, writers go without."""

    def take(self, timeout: float) -> bool:
        """This process's turn, within `timeout` seconds: True when this call
        took it (give it back with `give_back`); False when it could not be had
        in time, the file cannot be used, or the process holds it already (a
        nested write of the same thread): write without it, SQLite's lock
        still decides."""
        fd = self._descriptor()
        if fd is None or self._held:
            return False
        with self._guard:
            request = self._pending
            if request is not None:
                if self._stalled_since is not None:  # held past a wait: not waited for again
                    return False
                request.abandoned = False  # an earlier writer was interrupted: this one waits
            else:
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: no thread involved
                except OSError:
                    request = self._pending = _Request()
                    self._start_helper()
                    self._changed.notify()
                else:
                    self._held = True
                    return True
        try:
            request.granted.wait(timeout)
        except BaseException:  # (Ctrl-C in a shell): the turn must not stay with us
            with self._guard:
                if not request.granted.is_set():
                    request.abandoned = True
                elif not request.failed:
                    self._held = True
            self.give_back()
            raise
        with self._guard:
            gave_up = not request.granted.is_set()
            if gave_up:
                request.abandoned = True  # the helper hands it back when it comes
                stall_begins = self._stalled_since is None
                if stall_begins:
                    self._stalled_since = _CLOCK.monotonic()
        if gave_up:
            if stall_begins:
                self._say_held(fd, timeout)
            return False
        self._held = not request.failed
        return self._held

    def _say_held(self, fd: int, waited: float) -> None:
        holder = holder_of(fd)
        event(
            log,
            "store.writer_turn_held",
            logging.WARNING,
            file=self.path,
            holder="unknown" if holder is None else holder,
            waited=round(waited, 3),
        )

    def give_back(self) -> None:
        """Let the next writer have the turn. Never raises: a lock the kernel
        fails to release (ENOLCK on a network file system) is released anyway
        when the file is closed or the process ends, and the write it followed
        has committed."""
        if self._held and self._fd is not None:
            self._held = False
            with contextlib.suppress(OSError):
                fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """In a forked child, which starts with turns of its own: the parent's
        descriptor closed (fcntl locks are not inherited, and the child's close
        drops nothing of the parent's). Its helper thread is not in the child."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _descriptor(self) -> int | None:
        if self._fd is None and not self._unusable:
            with self._guard:
                if self._fd is None and not self._unusable:
                    self._fd = beside.open_file(self.path, self.path[: -len(SUFFIX)])
                    self._unusable = self._fd is None
        return self._fd

    def _start_helper(self) -> None:
        if self._helper is None or not self._helper.is_alive():
            self._helper = threading.Thread(
                target=self._serve, name="due-writer-turns", daemon=True
            )
            self._helper.start()

    def _serve(self) -> None:
        """The helper: waits in the kernel for each turn asked for. A turn that
        comes after its writer gave up is handed back at once, unless another
        writer of the process took the request over meanwhile (under the guard:
        the process never holds a turn nobody will give back, nor gives back
        one a writer holds)."""
        fd = self._fd
        assert fd is not None
        while True:
            with self._guard:
                while self._pending is None or self._pending.granted.is_set():
                    self._changed.wait()
                request = self._pending
            failed = False
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX)
            except OSError:  # (EDEADLK, EINTR): the writer goes on without its turn
                failed = True
            with self._guard:
                self._pending = None
                stalled_since, self._stalled_since = self._stalled_since, None
                if request.abandoned:
                    if not failed:
                        fcntl.lockf(fd, fcntl.LOCK_UN)
                else:
                    request.failed = failed
                    request.granted.set()
            if stalled_since is not None:
                stalled = round(_CLOCK.monotonic() - stalled_since, 3)
                event(log, "store.writer_turn_freed", file=self.path, stalled=stalled)


def holder_of(fd: int) -> int | None:
    """The process holding the lock on the open file `fd`, as Linux lists its
    locks in /proc/locks ("1: POSIX ADVISORY WRITE <pid> <dev:inode> 0 EOF";
    "->" marks a waiter). Elsewhere, or not found: None."""
    try:
        found = os.fstat(fd)
        listed = Path("/proc/locks").read_text()
    except OSError:
        return None
    file = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] != "->" and fields[5] == file and fields[4].isdigit():
            return int(fields[4])
    return None


class _Request:
    __slots__ = ("abandoned", "failed", "granted")

    def __init__(self) -> None:
        self.granted = threading.Event()
        self.abandoned = False
        self.failed = False
