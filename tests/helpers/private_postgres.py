"""A PostgreSQL cluster of a test's own, for faults that act on a whole server.

Every other test shares the machine's one server (127.0.0.1:5432) and its
`due_test` database, each in a schema of its own: a test that restarts that
server, or ends sessions it did not open, fails the tests of every other run
on the machine (a second `make test`, another engineer's, CI). A test that
needs to do that starts a cluster of its own instead:

    with private_cluster() as server:
        url = server.url()          # postgresql://postgres@127.0.0.1:<port>/due_test
        server.restart()            # pg_ctl restart: this cluster's sessions only
        server.terminate_sessions() # every client session of this cluster

It is made with the machine's PostgreSQL binaries (`pg_config --bindir`, or
the newest /usr/lib/postgresql/*/bin) by initdb in a temporary folder, with
trust authentication, listening on a free port of 127.0.0.1 and a unix socket
in that folder; stopped and removed when the block ends, however it ends. A
run killed outright cannot do that: the next cluster made on this machine
stops and removes the ones whose process is gone.

initdb and the server refuse to run as root: as root they run as the
`postgres` user (runuser), the folder theirs. `missing()` says what is
missing, for a test to skip with; DUE_TEST_HIDE_TOOLS=initdb makes the
binaries missing (tests/helpers/tools.py), as on a machine without them.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.helpers import tools
from tests.helpers.ports import free_port

SUPERUSER = "postgres"
"""The cluster's superuser (initdb -U): the same name whoever runs it."""
OS_USER_AS_ROOT = "postgres"
"""Who initdb and the server run as when the tests run as root."""
FOLDER_PREFIX = "due-private-pg-"
OWNER_FILE = "owner.pid"
"""The pid of the process that made the cluster: gone, the cluster is left over."""
START_ATTEMPTS = 3
"""A free port can be taken between choosing it and the server binding it."""
CONTROL_TIMEOUT = 60
"""Seconds pg_ctl may take to start, restart or stop the server (a loaded machine)."""
SETTINGS = """\
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
shared_buffers = 32MB
max_connections = 100
"""


class ClusterError(RuntimeError):
    """The cluster could not be made, started or controlled (its log's tail attached)."""


def postgres_bindir() -> Path | None:
    """The folder of the machine's initdb, pg_ctl and postgres, or None."""
    candidates: list[Path] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, timeout=10, check=True
        )
        candidates.append(Path(found.stdout.strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version, reverse=True)
    for folder in candidates:
        if all((folder / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def _version(bindir: Path) -> tuple[int, ...]:
    name = bindir.parent.name
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def missing() -> str | None:
    """What this machine lacks to make a private cluster (one line), or None."""
    skipped = "the tests that need a PostgreSQL cluster of their own are SKIPPED"
    if "initdb" in tools.hidden() or postgres_bindir() is None:
        return (
            "PostgreSQL's server binaries are missing (initdb, pg_ctl, postgres: neither "
            f"`pg_config --bindir` nor /usr/lib/postgresql/*/bin has them): {skipped} "
            "(`sudo apt-get install postgresql`)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(OS_USER_AS_ROOT)
        except KeyError:
            return f"running as root, and no `{OS_USER_AS_ROOT}` user to run initdb as: {skipped}"
        if shutil.which("runuser") is None:
            return f"running as root, and no `runuser` to run initdb as another user: {skipped}"
    return None


@dataclass
class PrivatePostgres:
    bindir: Path
    folder: Path
    port: int
    database: str

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def sockets(self) -> Path:
        return self.folder / "sockets"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def url(self, database: str | None = None) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database or self.database}"

    def restart(self) -> None:
        """Stop the server (fast: every session ended) and start it again."""
        self._control("restart", "-m", "fast")

    def terminate_sessions(self) -> int:
        """End every client session of this cluster but the one asking; how many."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchone()
        return int(row[0]) if row else 0

    def start(self) -> None:
        self._control("start")

    def stop(self) -> None:
        """Stop the server; at once (immediate) if a fast stop does not end it."""
        if not (self.data / "postmaster.pid").exists():
            return  # not running (a restart that failed)
        try:
            self._control("stop", "-m", "fast")
        except ClusterError:
            self._control("stop", "-m", "immediate")

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def _control(self, action: str, *options: str) -> None:
        """pg_ctl, its output and the server's in the log: the server started
        keeps what it was given open, and a pipe would never end."""
        command = [str(self.bindir / "pg_ctl"), action, "-D", str(self.data), "-w"]
        command += ["-t", str(CONTROL_TIMEOUT), *options]
        with self.log.open("ab") as log:
            done = subprocess.run(
                _as_cluster_user(command),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                timeout=CONTROL_TIMEOUT + 30,
                check=False,
            )
        if done.returncode != 0:
            raise ClusterError(f"pg_ctl {action} failed ({done.returncode}):\n{self.log_tail()}")


@contextlib.contextmanager
def private_cluster(database: str = "due_test") -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of its own with an empty `database`, removed at the end."""
    reason = missing()
    if reason is not None:
        raise ClusterError(reason)
    bindir = postgres_bindir()
    assert bindir is not None
    remove_left_over_clusters()
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    try:
        (folder / OWNER_FILE).write_text(f"{os.getpid()}\n")
        folder.chmod(0o755)  # the cluster's user reaches its own folders through it
        for mine in ("data", "sockets"):
            (folder / mine).mkdir(mode=0o700)
        server = PrivatePostgres(bindir, folder, 0, database)
        _give_to_cluster_user(server.data, server.sockets)
        _initdb(server)
        _start_on_a_free_port(server)
        try:
            with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_left_over_clusters() -> None:
    """Stop and remove the clusters of processes that are gone (killed outright)."""
    bindir = postgres_bindir()
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            if folder.stat().st_uid != os.geteuid():
                continue
            owner = int((folder / OWNER_FILE).read_text().strip() or 0)
        except (OSError, ValueError):
            continue
        if not owner or _alive(owner):  # (0: its maker is writing its pid now)
            continue
        if bindir is not None and (folder / "data" / "postmaster.pid").exists():
            server = PrivatePostgres(bindir, folder, 0, "")
            with contextlib.suppress(ClusterError, OSError, subprocess.SubprocessError):
                server._control("stop", "-m", "immediate")
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _initdb(server: PrivatePostgres) -> None:
    command = [
        str(server.bindir / "initdb"),
        *("-D", str(server.data), "-U", SUPERUSER, "-A", "trust"),
        *("-E", "UTF8", "--no-locale", "--no-sync"),  # a throwaway cluster
    ]
    with server.log.open("ab") as log:
        done = subprocess.run(
            _as_cluster_user(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=server.folder,
            timeout=120,
            check=False,
        )
    if done.returncode != 0:
        raise ClusterError(f"initdb failed ({done.returncode}):\n{server.log_tail()}")
    with (server.data / "postgresql.conf").open("a") as conf:
        conf.write("\ninclude 'private.conf'\n")


def _start_on_a_free_port(server: PrivatePostgres) -> None:
    for attempt in range(START_ATTEMPTS):
        server.port = free_port()
        settings = SETTINGS.format(port=server.port, sockets=server.sockets)
        (server.data / "private.conf").write_text(settings)
        _give_to_cluster_user(server.data / "private.conf")
        try:
            server.start()
            return
        except ClusterError:
            server.stop()  # one still starting when pg_ctl gave up: not left running
            if attempt == START_ATTEMPTS - 1:
                raise


def _as_cluster_user(command: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", OS_USER_AS_ROOT, "--", *command]
    return command


def _give_to_cluster_user(*paths: Path) -> None:
    """As root: the cluster's own files to the user it runs as (initdb refuses
    root). The folder around them stays the caller's (its log, its owner file)."""
    if os.geteuid() != 0:
        return
    user = pwd.getpwnam(OS_USER_AS_ROOT)
    for path in paths:
        os.chown(path, user.pw_uid, user.pw_gid)
