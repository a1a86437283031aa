"""What due keeps beside a SQLite database file, and what of it to trust.

Two things sit beside `due.db`: the writer turns' file (`due.db-due-writers`,
writer_turns.py) and the doorbells' folder (`due.db-wake/`, doorbell.py).
Both only make things faster, and what a process finds there must never do it
harm. One rule for both: **who may write the database may use them, and
nobody else.**

- Made by due, each class of user (owner, group, others) that may write the
  database file gets read and write on the file, and read, write and search on
  the folder; a class that may only read the database gets nothing, whatever
  the umask (reading the turns' file let any local user take a shared lock on
  it, which stalled every writer). Made as root, they are given to the
  database file's owner and group, as SQLite gives its -wal and -shm files.
- Found there, they are used only when they are what due makes: a regular
  file, a folder (never a symbolic link, which is not followed: a planted one
  made root open another file read and write), made by a user who may write
  the database (this process's, root, the database file's owner, the
  database's group when it may write it, anyone when others may), and
  granting nobody more than the rule gives. A mode that differs from the
  rule's is set to it when this process may (its owner, or root); one that
  grants more and cannot be changed, and anything else found there, is left
  alone: a warning says why (once a process, `store.file_refused`) and due
  goes without it (writers take SQLite's lock as they would without turns, a
  worker polls for commits, an enqueue rings nobody).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from dataclasses import dataclass

from due.logs import event

log = logging.getLogger("due.store")
WRITE_BITS = 0o222
_refused: set[str] = set()
"""Paths a warning was logged for, in this process."""


@dataclass(frozen=True)
class Sharing:
    """Who may write the database file: its owner, its group, and which of
    owner, group and others have its write bits."""

    uid: int
    gid: int
    writers: int

    @classmethod
    def of(cls, database: str) -> Sharing:
        """The database file's sharing (OSError: it is not there)."""
        found = os.stat(database)
        return cls(found.st_uid, found.st_gid, found.st_mode & WRITE_BITS)

    def mode(self, *, folder: bool) -> int:
        """Read and write (and search, for a folder) for each class that may
        write the database; the owner always."""
        bits = self.writers | self.writers << 1 | 0o600
        return bits | (self.writers >> 1 | 0o100 if folder else 0)

    def made_by_a_writer(self, found: os.stat_result) -> bool:
        return (
            found.st_uid in (os.geteuid(), 0, self.uid)
            or ((self.writers & 0o020) != 0 and found.st_gid == self.gid)
            or (self.writers & 0o002) != 0
        )


def open_file(path: str, database: str) -> int | None:
    """The file at `path` opened for reading and writing, made if missing, or
    None: the database is not there, the file cannot be opened (a read-only
    folder, not ours to open), or it is refused (warned)."""
    try:
        sharing = Sharing.of(database)
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK  # (a FIFO: not waited on)
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return _opened_as_found(path, sharing, flags, folder=False)
    except OSError:
        return None
    return _made(fd, sharing, folder=False)


def open_folder(path: str, database: str, *, make: bool) -> int | None:
    """A descriptor of the folder at `path` (read only: to list it, or to keep
    it), made if missing and `make`, or None as for `open_file`."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        sharing = Sharing.of(database)
        if make:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            else:
                return _made(os.open(path, flags), sharing, folder=True)
        return _opened_as_found(path, sharing, flags, folder=True)
    except OSError:
        return None


def refused(path: str, reason: str, instead: str) -> None:
    """Warn, once a process for each path, that what is there is not used."""
    if path not in _refused:
        _refused.add(path)
        event(log, "store.file_refused", logging.WARNING, path=path, reason=reason, instead=instead)


def _made(fd: int, sharing: Sharing, *, folder: bool) -> int:
    """Just made by this process: given the database's owner when made as root
    (so that its processes can settle it later), and the rule's mode."""
    with contextlib.suppress(OSError):
        if os.geteuid() == 0:
            os.fchown(fd, sharing.uid, sharing.gid)
        special = stat.S_IMODE(os.fstat(fd).st_mode) & ~0o777  # (a setgid folder's, kept)
        os.fchmod(fd, sharing.mode(folder=folder) | special)
    return fd


def _opened_as_found(path: str, sharing: Sharing, flags: int, *, folder: bool) -> int | None:
    """Opened without following a link, and kept only when it passes the rule
    (its mode set to the rule's where this process may)."""
    reason = _refusal(os.lstat(path), sharing, folder=folder)  # (before opening: a device is not)
    if reason is not None:
        refused(path, reason, _INSTEAD[folder])
        return None
    fd = os.open(path, flags)
    try:
        found = os.fstat(fd)
        reason = _refusal(found, sharing, folder=folder) or _settled(fd, found, sharing, folder)
    except BaseException:
        os.close(fd)
        raise
    if reason is not None:
        os.close(fd)
        refused(path, reason, _INSTEAD[folder])
        return None
    return fd


_INSTEAD = {
    False: "writers take SQLite's lock without turns",
    True: "workers poll for commits; enqueues ring nobody",
}


def _refusal(found: os.stat_result, sharing: Sharing, *, folder: bool) -> str | None:
    """Why what was found may not be used, or None."""
    if stat.S_ISLNK(found.st_mode):
        return "a symbolic link (not followed)"
    if folder and not stat.S_ISDIR(found.st_mode):
        return "not a folder"
    if not folder and not stat.S_ISREG(found.st_mode):
        return "not a regular file"
    if not sharing.made_by_a_writer(found):
        return (
            f"owned by uid {found.st_uid}, not a user who may write the database "
            f"(whose owner is uid {sharing.uid})"
        )
    return None


def _settled(fd: int, found: os.stat_result, sharing: Sharing, folder: bool) -> str | None:
    """Its mode set to the rule's where this process may (and, root's, given to
    the database file's owner); why not, when it then grants more than the
    rule (None: it grants no more)."""
    if os.geteuid() == 0 and found.st_uid == 0 and sharing.uid != 0:  # (root's, of an earlier due)
        with contextlib.suppress(OSError):
            os.fchown(fd, sharing.uid, sharing.gid)
    wanted = sharing.mode(folder=folder)
    mode = stat.S_IMODE(found.st_mode) & 0o777
    if mode == wanted:
        return None
    if found.st_uid == os.geteuid() or os.geteuid() == 0:
        with contextlib.suppress(OSError):
            os.fchmod(fd, wanted | stat.S_IMODE(found.st_mode) & ~0o777)
            return None
    if mode & ~wanted:
        return f"mode {mode:o} lets users who may not write the database use it (wanted {wanted:o})"
    return None
