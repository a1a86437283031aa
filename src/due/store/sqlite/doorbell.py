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
- the folder cannot be made or written (a read-only directory, another
  user's folder, a path taken by a file), or the path is too long for a
  socket's address: that worker polls, and a sender finds no socket to write
  to, or may not write to it, and sends nothing;
- a worker killed without closing its socket leaves the file: a send to it is
  refused (ECONNREFUSED) and the sender removes it; a worker binding sweeps
  the folder of such files too;
- a worker whose socket's buffer is full (a burst of commits) is awake
  already: the send, which never blocks, is dropped.

A ring costs a listing of the folder and a datagram per worker (microseconds,
against the commit's `fsync`). A worker that hears one reads `data_version`
before it claims: a ring for a commit its poll already saw wakes nothing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import stat

FOLDER_SUFFIX = "-wake"
MAX_ADDRESS_BYTES = 100
"""A socket's path must fit its address (108 bytes on Linux, 104 on macOS);
longer: no doorbell, the worker polls."""
RING = b"!"
_HAS_SOCKETS = hasattr(socket, "AF_UNIX") and hasattr(select, "poll")


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
        try:
            _make_folder(folder, database)
            sock.bind(path)
        except OSError:
            sock.close()
            return None
        _share(path, _mode_of(database))
        sweep(folder, keep=path)
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
        self._sock: socket.socket | None = None

    def ring(self) -> int:
        """Send a byte to every worker's socket in the folder; returns how many
        took it. Never raises: a worker not woken polls."""
        try:
            names = os.listdir(self.folder)
        except OSError:  # no folder (no worker has listened), or not ours to read
            return 0
        if not names:
            return 0
        sock = self._socket()
        if sock is None:
            return 0
        sent = 0
        for name in names:
            path = os.path.join(self.folder, name)
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


def sweep(folder: str, keep: str = "") -> int:
    """Remove the sockets nobody listens on any more (their workers were killed);
    returns how many. Looking sends nothing: a connect to a live socket is
    accepted, to a dead one refused."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    removed = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        for name in names:
            path = os.path.join(folder, name)
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


def _mode_of(database: str) -> int | None:
    """The database file's read and write bits: who may write it may ring."""
    try:
        return stat.S_IMODE(os.stat(database).st_mode) & 0o666
    except OSError:
        return None


def _make_folder(folder: str, database: str) -> None:
    """The folder, made as the database file is shared (its read bits give the
    folder's search bits); already there, it is taken as it is."""
    mode = _mode_of(database)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        return
    if mode is not None:
        with contextlib.suppress(OSError):
            os.chmod(folder, mode | (mode & 0o444) >> 2 | 0o700)


def _share(path: str, mode: int | None) -> None:
    if mode is not None:
        with contextlib.suppress(OSError):
            os.chmod(path, mode | 0o600)
