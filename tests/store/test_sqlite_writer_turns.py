"""SQLite: due's writers of several processes wait their turn on a lock the
kernel hands on (writer_turns.py), so a waiting process writes the moment the
one before it lets go, a process that dies frees its turn, and a turn held too
long (a frozen process) delays one write by a tenth of its busy timeout, never
fails it. The turns' file is open to who may write the database only, and one
found in its place that is not due's is left alone (beside.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import due
from due.store.sqlite.writer_turns import SUFFIX, WriterTurns
from tests.helpers.waiting import wait_until
from tests.helpers.workers import holds_a_lock_on
from tests.store.test_sqlite_writers import BackgroundEnqueue, make_app

NOBODY = 65534
HOLD_THE_TURN = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
deadline = time.monotonic() + 20
while True:  # until it is this process's
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
    except OSError:
        if time.monotonic() > deadline:
            print("never", flush=True)
            sys.exit(1)
        time.sleep(0.01)
print("held", flush=True)
sys.stdin.readline()  # held until told, or killed
"""


class TurnHolder:
    """Another process holding the file's turn, as a due writer of it does."""

    def __init__(self, database: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLD_THE_TURN, database + SUFFIX],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == "held\n"

    def let_go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        self.process.wait(30)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()


def database(app: due.App) -> str:
    return str(Path(app.store.backend.path).resolve())  # type: ignore[attr-defined]


def test_a_write_waits_for_another_processs_turn_and_goes_the_moment_it_ends(
    sqlite_url: str,
) -> None:
    app, t = make_app(sqlite_url)
    t.enqueue(0)  # the turns' file made beside the database
    assert Path(database(app) + SUFFIX).exists()
    holder = TurnHolder(database(app))
    try:
        writer = BackgroundEnqueue(t, 1)
        assert not writer.finished(0.3), "the enqueue did not wait for the other's turn"
        asked = time.monotonic()
        holder.let_go()
        assert writer.finished(10)
        assert time.monotonic() - asked < 1.0  # handed on, not found by a slow retry
        assert sorted(job.args for job in app.jobs()) == [(0,), (1,)]
    finally:
        holder.stop()
        app.close()


def test_a_process_killed_during_its_turn_frees_it(sqlite_url: str) -> None:
    app, t = make_app(sqlite_url)
    holder = TurnHolder(database(app))
    try:
        writer = BackgroundEnqueue(t, 1)
        assert not writer.finished(0.3)
        holder.kill()
        assert writer.finished(10)
        assert [job.args for job in app.jobs()] == [(1,)]
    finally:
        app.close()


def held_events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_a_frozen_turn_holder_costs_one_wait_a_tenth_of_the_busy_timeout_and_is_named(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 49, finding 13: a process frozen while it held its turn made every
    other process's write wait its whole busy timeout (30 s) for it, quietly.
    A writer now waits a tenth of it, a second at most, names the holder, and
    the process writes without turns until the turn comes back (SQLite's own
    lock, free here, decides); a later hold is waited for, and named, again."""
    app, t = make_app(sqlite_url)  # the default busy timeout: 30 s
    t.enqueue(0)
    frozen = TurnHolder(database(app))
    frozen.process.send_signal(signal.SIGSTOP)
    try:
        with caplog.at_level(logging.INFO, logger="due.store"):
            started = time.monotonic()
            t.enqueue(1)
            assert time.monotonic() - started < 10  # one turn wait (1 s), not 30 s
            started = time.monotonic()
            for n in range(2, 7):
                t.enqueue(n)
            assert time.monotonic() - started < 2.5  # not a wait each (5 s)
            (held,) = held_events(caplog, "store.writer_turn_held")
            assert held.levelno == logging.WARNING
            holder = frozen.process.pid if Path("/proc/locks").exists() else "unknown"
            assert held.fields["holder"] == holder  # type: ignore[attr-defined]
            assert held.fields["file"] == database(app) + SUFFIX  # type: ignore[attr-defined]
            frozen.process.send_signal(signal.SIGCONT)
            frozen.let_go()
            wait_until(lambda: held_events(caplog, "store.writer_turn_freed"), what="the turn back")
            t.enqueue(7)  # with its turn again
            again = TurnHolder(database(app))  # (given back: another process has it at once)
            t.enqueue(8)
            assert len(held_events(caplog, "store.writer_turn_held")) == 2
            again.let_go()
        assert sorted(job.args[0] for job in app.jobs()) == list(range(9))
    finally:
        frozen.process.send_signal(signal.SIGCONT)
        frozen.stop()
        app.close()


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="Linux lists its locks there")
def test_the_process_tests_see_which_process_holds_the_turn(sqlite_url: str) -> None:
    """Their pause of a worker (tests/helpers/workers.py) waits for a moment it
    holds no turn, which it reads in /proc/locks: a turn held is seen there,
    and whose it is."""
    app, t = make_app(sqlite_url)
    t.enqueue(0)
    holder = TurnHolder(database(app))
    try:
        assert holds_a_lock_on(holder.process.pid, database(app) + SUFFIX)
        assert not holds_a_lock_on(os.getpid(), database(app) + SUFFIX)
        holder.let_go()
        t.enqueue(1)  # this process's turn, given back at once
        assert not holds_a_lock_on(os.getpid(), database(app) + SUFFIX)
    finally:
        holder.stop()
        app.close()


def test_without_a_turns_file_due_writes_as_before(tmp_path: Path) -> None:
    """A file that cannot be opened (here a folder in its place): SQLite's lock
    alone decides, as for writers that take no turn."""
    Path(f"{tmp_path / 'jobs.db'}{SUFFIX}").mkdir()
    app, t = make_app(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        t.enqueue(1)
        assert [job.args for job in app.jobs()] == [(1,)]
    finally:
        app.close()


class Interrupted(Exception):
    """What Ctrl-C is to a shell's enqueue: raised in the waiting thread."""


def test_a_wait_for_the_turn_cut_off_gives_the_turn_back_when_it_comes(
    sqlite_url: str,
) -> None:
    """A writer interrupted while it waits (Ctrl-C in a shell) must not keep the
    turn its helper thread receives later: every other process's write would
    wait its whole busy timeout for it."""
    app, _ = make_app(sqlite_url)
    turns = WriterTurns(database(app))
    holder = TurnHolder(database(app))

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted):
            turns.take(30)
        holder.let_go()  # the helper thread now gets the turn nobody waits for
        asked = time.monotonic()
        TurnHolder(database(app)).let_go()  # another process can have it
        assert time.monotonic() - asked < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        holder.stop()
        turns.close()
        app.close()


@pytest.mark.parametrize(
    ("database_mode", "turns_mode"),
    [(0o644, 0o600), (0o640, 0o600), (0o664, 0o660), (0o666, 0o666), (0o600, 0o600)],
)
def test_the_turns_file_is_open_to_who_may_write_the_database_only(
    tmp_path: Path, database_mode: int, turns_mode: int
) -> None:
    """A web server and a worker of one group, as two users, must each open it
    (the group may write the database); a user who may only read the database
    may not (made with the database's mode, 0644, any local user could take a
    shared lock on it and stall every write: issue 49, finding 13)."""
    path = tmp_path / "jobs.db"
    path.touch()
    path.chmod(database_mode)  # (an empty file is a database SQLite makes its own)
    previous = os.umask(0o077)  # whatever the umask
    try:
        app, t = make_app(f"sqlite:///{path}")
    finally:
        os.umask(previous)
    try:
        t.enqueue(1)
        assert Path(f"{path}{SUFFIX}").stat().st_mode & 0o777 == turns_mode
    finally:
        app.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user (nobody) needs root")
def test_a_user_who_may_only_read_the_database_cannot_open_the_turns_file() -> None:
    """The shared lock of issue 49, finding 13, tried as that user."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        os.chmod(folder, 0o755)  # (pytest's own folders are closed to other users)
        path = Path(folder) / "jobs.db"
        path.touch()
        path.chmod(0o644)
        app, t = make_app(f"sqlite:///{path}")
        try:
            t.enqueue(1)
            assert as_nobody("cat", str(path)).returncode == 0  # the database: readable
            refused = as_nobody("cat", f"{path}{SUFFIX}")
            assert refused.returncode != 0 and "Permission denied" in refused.stderr
        finally:
            app.close()


def as_nobody(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, user=NOBODY, capture_output=True, text=True, timeout=30)


def open_here(path: Path) -> bool:
    """Whether this process has the file at `path` open (Linux: /proc/self/fd)."""
    target = str(path.resolve())
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                return True
    return False


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="Linux lists open files there")
def test_a_symbolic_link_in_the_turns_files_place_is_not_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 49, finding 14: a planted `-due-writers` link made the writer (root,
    here) open the file it names for reading and writing, and lock it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not due's")
    elsewhere.chmod(0o600)
    Path(f"{tmp_path / 'jobs.db'}{SUFFIX}").symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING, logger="due.store"):
        app, t = make_app(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        t.enqueue(1)
        assert [job.args for job in app.jobs()] == [(1,)]
        assert not open_here(elsewhere)
        assert elsewhere.read_text() == "not due's"
        (refused,) = held_events(caplog, "store.file_refused")
        assert "symbolic link" in refused.fields["reason"]  # type: ignore[attr-defined]
    finally:
        app.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user (nobody) needs root")
@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="Linux lists open files there")
def test_a_turns_file_of_a_user_who_may_not_write_the_database_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its owner could lock it whenever they like, or open it to anyone."""
    turns = Path(f"{tmp_path / 'jobs.db'}{SUFFIX}")
    turns.touch()
    turns.chmod(0o666)
    os.chown(turns, NOBODY, NOBODY)
    with caplog.at_level(logging.WARNING, logger="due.store"):
        app, t = make_app(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        t.enqueue(1)
        assert [job.args for job in app.jobs()] == [(1,)]
        assert not open_here(turns)
        (refused,) = held_events(caplog, "store.file_refused")
        assert f"uid {NOBODY}" in refused.fields["reason"]  # type: ignore[attr-defined]
    finally:
        app.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file for another user needs root")
def test_a_turns_file_made_as_root_belongs_to_the_databases_owner(tmp_path: Path) -> None:
    """As SQLite's -wal and -shm files: the processes of the database's owner
    (a worker after `sudo due migrate`) can still use, and settle, it."""
    path = tmp_path / "jobs.db"
    path.touch()
    os.chown(path, NOBODY, NOBODY)
    app, t = make_app(f"sqlite:///{path}")
    try:
        t.enqueue(1)
        made = Path(f"{path}{SUFFIX}").stat()
        assert (made.st_uid, made.st_gid) == (NOBODY, NOBODY)
    finally:
        app.close()


def test_a_turns_file_found_open_to_readers_of_the_database_is_closed_to_them(
    tmp_path: Path,
) -> None:
    """Made by an earlier due with the database's mode: set to the rule's by
    its owner's first write."""
    path = tmp_path / "jobs.db"
    path.touch()
    path.chmod(0o644)
    turns = Path(f"{path}{SUFFIX}")
    turns.touch()
    turns.chmod(0o644)
    app, t = make_app(f"sqlite:///{path}")
    try:
        t.enqueue(1)
        assert turns.stat().st_mode & 0o777 == 0o600
    finally:
        app.close()
