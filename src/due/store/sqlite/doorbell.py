"""The doorbell: a commit that makes a job claimable wakes this host's SQLite workers.

SQLite sends no notifications. A worker's job feed learns of another
process's commit by reading `PRAGMA data_version` every few milliseconds,
which put up to a poll's wait (5 ms) into every pickup. So each worker's feed
also binds a Unix datagram socket in a folder beside the database file
(`due.db` → `due.db-wake/`), and a process whose transaction ran a statement
that makes a job claimable (those that send a NOTIFY on PostgreSQL) sends one
byte to every socket there once its COMMIT has returned: the worker wakes at
once, and finds the job committed. Every process that writes the file is on
this host (SQLite cannot be shared further), so every worker can be reached.

The polling stays, as the fallback for whatever rings no bell, and nothing
here can fail an enqueue or lose a job:

- a job enqueued in the caller's own transaction (`enqueue(connection=...)`
  with the transaction left open): due does not see the caller's COMMIT, and
  a byte sent before it would wake the worker too soon; the poll finds it;
- the folder cannot be made or written (a read-only directory, a path too
  long for a socket's address), or what is there is not what due makes
  (beside.py: a file in its place, a symbolic link, another user's folder,
  one users who may not write the database may write): that worker polls,
  and a sender finds no socket to write to, or may not write to it, and
  sends nothing;
- a worker killed without closing its socket leaves the file: a send to it is
  refused (ECONNREFUSED) and the sender removes it; a worker binding sweeps
  the folder of such files too;
- a worker whose socket's buffer is full (a burst of commits) is awake
  already: the send, which never blocks, is dropped.

A ring costs a look at the folder's modification time and a datagram per
worker (microseconds, against the commit's `fsync`): the sockets found are
kept until the folder changes. What else is in the folder is skipped
without a look of its own (only a socket is ever sent to, never a symbolic
link), and a listing reads MAX_ENTRIES entries at most: 20,000 stray files
there made every enqueue list and try each of them (a hundred times its
time). A worker that hears a ring reads `data_version` before it claims: a
ring for a commit its poll already saw wakes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import select
import socket
import stat

from due.clock import SystemClock
from due.logs import event
from due.store.sqlite import beside

FOLDER_SUFFIX = "-wake"
MAX_ADDRESS_BYTES = 100
"""A socket's path must fit its address (108 bytes on Linux, 104 on macOS);
longer: no doorbell, the worker polls."""
RING = b"!"
MAX_ENTRIES = 1024
"""The most entries of the folder one listing reads (one socket a worker
process: a host's workers of one file are far fewer). Past it, the workers
whose sockets were not read poll, and a warning says so."""
SETTLING = 2.0
"""Seconds for which a folder that changed is listed again at every ring: its
modification time is kept to a clock tick (a second on some file systems),
so a socket bound within the tick of a listing leaves it as it was."""
_HAS_SOCKETS = hasattr(socket, "AF_UNIX") and hasattr(select, "poll")
_CLOCK = SystemClock()
log = logging.getLogger("due.store")
_crowded: set[str] = set()


def folder_of(database: str) -> str:
    """Where the workers of this database file bind their sockets."""
    return os.path.abspath(database) + FOLDER_SUFFIX


class Doorbell:
    """A worker's socket in the folder: `wait` returns once someone rang."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        sock.setblocking(False)
        self._sock = sock
        self.path = path
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    @classmethod
    def open(cls, database: str) -> Doorbell | None:
        """A doorbell for this database file, or None where none can be had (the
        worker polls: no Unix sockets, a folder it cannot make or write, a path
        too long)."""
        if not _HAS_SOCKETS:
            return None
        folder = folder_of(database)
        path = os.path.join(folder, f"{os.getpid()}-{secrets.token_hex(4)}")
        if len(os.fsencode(path)) > MAX_ADDRESS_BYTES:
            return None
        try:  # (EMFILE, a process out of descriptors: it polls)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        except OSError:
            return None
        checked = beside.open_folder(folder, database, make=True)  # (made, or found fit)
        if checked is not None:
            os.close(checked)
        try:
            if checked is None:
                raise OSError(f"no folder of due's at {folder}")
            sock.bind(path)
            sharing = beside.Sharing.of(database)
        except OSError:
            sock.close()
            return None
        _share(path, sharing)
        sweep(folder, database, keep=path)
        return cls(sock, path)

    def wait(self, timeout: float) -> bool:
        """Whether it rang within `timeout` seconds (every ring waiting is taken:
        they make one wake-up)."""
        if not self._poll.poll(max(timeout, 0.0) * 1000):
            return False
        with contextlib.suppress(OSError):  # the socket never blocks: until none is left
            while True:
                self._sock.recv(16)
        return True

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class Bell:
    """What a process rings after a commit that made a job claimable."""

    def __init__(self, database: str) -> None:
        self.folder = folder_of(database)
        self._sockets = _Sockets(self.folder, database)
        self._sock: socket.socket | None = None

    def ring(self) -> int:
        """Send a byte to every worker's socket in the folder; returns how many
        took it. Never raises: a worker not woken polls."""
        paths = self._sockets.current()
        if not paths:
            return 0
        sock = self._socket()
        if sock is None:
            return 0
        sent = 0
        for path in paths:
            try:
                sock.sendto(RING, path)
                sent += 1
            except ConnectionRefusedError:  # nobody bound: its worker was killed
                _remove_socket(path)
            except OSError:  # full (that worker is awake), gone, not ours to write
                pass
        return sent

    def _socket(self) -> socket.socket | None:
        sock = self._sock
        if sock is None and _HAS_SOCKETS:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            except OSError:
                return None
            sock.setblocking(False)  # a full receiver drops the ring, never stalls a commit
            self._sock = sock
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class _Sockets:
    """The sockets in the folder, listed again only when it changed (its
    modification time, inode or device differ, or it changed SETTLING seconds
    ago or less)."""

    def __init__(self, folder: str, database: str) -> None:
        self.folder = folder
        self.database = database
        self._seen: tuple[int, int, int] | None = None
        self._trusted_from = float("-inf")
        self._paths: list[str] = []

    def current(self) -> list[str]:
        try:
            found = os.lstat(self.folder)
        except OSError:  # no folder: no worker has listened
            self._seen = None
            return []
        seen = (found.st_dev, found.st_ino, found.st_mtime_ns)
        now = _CLOCK.monotonic()
        if seen == self._seen and now >= self._trusted_from:
            return self._paths
        if seen != self._seen:  # (in this order: a ring on another thread lists again too)
            self._trusted_from = now + SETTLING
            self._seen = seen
        self._paths = sockets_in(self.folder, self.database)
        return self._paths


def sockets_in(folder: str, database: str) -> list[str]:
    """The paths of the sockets in the folder, if it is one due may use
    (beside.py), among its first MAX_ENTRIES entries. Files, folders and links
    are skipped on the type their listing gives (no look of their own)."""
    fd = beside.open_folder(folder, database, make=False)
    if fd is None:
        return []
    paths = []
    try:
        with os.scandir(fd) as entries:
            for read, entry in enumerate(entries):
                if read == MAX_ENTRIES:
                    _warn_crowded(folder)
                    break
                if entry.is_symlink() or entry.is_file() or entry.is_dir():
                    continue  # (the listing's type: free)
                with contextlib.suppress(OSError):
                    if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                        paths.append(os.path.join(folder, entry.name))
    except OSError:
        return []
    finally:
        os.close(fd)
    return paths


def _warn_crowded(folder: str) -> None:
    if folder not in _crowded:
        _crowded.add(folder)
        event(
            log,
            "store.wake_folder_crowded",
            logging.WARNING,
            folder=folder,
            read=MAX_ENTRIES,
            instead="workers whose sockets were not read poll; remove what is not a socket",
        )


def sweep(folder: str, database: str, keep: str = "") -> int:
    """Remove the sockets nobody listens on any more (their workers were killed);
    returns how many. Looking sends nothing: a connect to a live socket is
    accepted, to a dead one refused."""
    removed = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        for path in sockets_in(folder, database):
            if path == keep:
                continue
            try:
                probe.connect(path)
            except ConnectionRefusedError:
                removed += _remove_socket(path)
            except OSError:
                pass
    return removed


def _remove_socket(path: str) -> int:
    """Remove a dead socket's file (only a socket: anything else put there stays)."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
            return 1
    return 0


def _share(path: str, sharing: beside.Sharing) -> None:
    """The socket, as the folder: writable by who may write the database (a
    sender needs write permission), and its owner's when made as root."""
    with contextlib.suppress(OSError):
        if os.geteuid() == 0:
            os.chown(path, sharing.uid, sharing.gid, follow_symlinks=False)
        os.chmod(path, sharing.mode(folder=False))
