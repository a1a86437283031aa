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
opened (a read-only folder) leaves due's writers trying as before.

The kernel's wait has no timeout, so a helper thread of the process waits in
it while the writer waits on an event, for as long as its busy timeout
allows; a turn that comes after the writer gave up is handed straight back.
fcntl locks belong to the process: one writer thread of a process holds its
turn at a time (the process's writer lock, taken first), a forked child has
none of its parent's, and nothing else of the process may open and close the
file (closing any descriptor of it would drop the process's turn).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading

SUFFIX = "-due-writers"


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
            if request is not None:  # an earlier writer gave up on it: this one waits
                request.abandoned = False
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
            if not request.granted.is_set():
                request.abandoned = True  # the helper hands it back when it comes
                return False
        self._held = not request.failed
        return self._held

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
                    try:
                        self._fd = _open_beside(self.path, self.path[: -len(SUFFIX)])
                    except OSError:
                        self._unusable = True
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
                if request.abandoned:
                    if not failed:
                        fcntl.lockf(fd, fcntl.LOCK_UN)
                else:
                    request.failed = failed
                    request.granted.set()


def _open_beside(path: str, database: str) -> int:
    """The turns file, made with the database file's read and write bits (as
    SQLite makes its -wal and -shm files): a web server and a worker that run
    as two users of one group share the database, and so must they share it."""
    flags = os.O_RDWR | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return os.open(path, flags)
    with contextlib.suppress(OSError):
        os.fchmod(fd, os.stat(database).st_mode & 0o666)
    return fd


class _Request:
    __slots__ = ("abandoned", "failed", "granted")

    def __init__(self) -> None:
        self.granted = threading.Event()
        self.abandoned = False
        self.failed = False
