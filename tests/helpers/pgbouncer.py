"""A real PgBouncer (Debian's `pgbouncer`, 1.18 on bookworm) in front of the test
PostgreSQL, started by a test on a free port with a config of its own.

    with PgBouncer.start(tmp_dir=tmp_path) as bouncer:
        app = due.App(bouncer.url(due_pooler="transaction"))

The process runs in the foreground (never daemonized) as a child of the test,
its log goes to `<tmp_dir>/pgbouncer.log`, and it is stopped on exit.
`scripts/ensure-pgbouncer` installs the package.

Root: pgbouncer refuses to run as root ("FATAL PgBouncer should not run as
root"). Started as root it is given `-u nobody`: it reads its ini and auth file
as root, then drops to `nobody` before opening anything else. That is why there
is no `logfile` or `pidfile` setting (nobody could not write them into pytest's
0700 folders; stderr is captured by the parent instead, and a foreground child
needs no pidfile) and why a RELOAD/SIGHUP would fail (nobody cannot re-read the
files): start another instance instead.

Every setting written to the ini, and why:

- `[databases] <database> = host=... port=... dbname=<database>`: the alias
  clients name in their URL. With `search_path=`, the entry also gets
  `connect_query='SET search_path TO <schema>'`, run once on every server
  connection this alias opens (see "Per-test schemas" below).
- `[databases] * = host=... port=...`: the fallback ("autodb") entry, so any
  other database name is forwarded to the same-named database upstream; a test
  can CREATE DATABASE and use it through this bouncer with no config change.
- `listen_addr = 127.0.0.1`, `listen_port = <free port>`: loopback only, a port
  of its own so instances of parallel tests never collide.
- `unix_socket_dir =` (empty): no Unix socket; the default (/tmp) would put a
  `.s.PGSQL.<port>` file into a shared folder.
- `auth_type = trust`, `auth_file`: PostgreSQL here trusts local TCP; pgbouncer's
  `trust` still requires the user to be listed in the auth file (an unlisted user
  gets `FATAL: "trust" authentication failed`), hence root and postgres.
- `admin_users = root`: lets a test use the admin console (database `pgbouncer`:
  SHOW POOLS, KILL <db>) through `admin()`.
- `pool_mode = transaction`: the mode under test; a server connection is lent
  to a client for one transaction only, so nothing session-scoped survives.
- `max_client_conn = 200`, `default_pool_size = 20`: enough client slots for a
  few workers with their pools; fewer server connections than clients, as in
  production, so session state really is shared between clients.
- No `ignore_startup_parameters`: libpq (psycopg) sends no `extra_float_digits`
  (that is JDBC/asyncpg) and cannot send `search_path` as a startup parameter;
  the only one that matters is `options`, and listing it would make pgbouncer
  silently DROP it (`options=-csearch_path=t_x` then lands in `public`). Left
  out, pgbouncer refuses it loudly: `FATAL: unsupported startup parameter:
  options`. Pass `settings={"ignore_startup_parameters": "options"}` to see the
  silent behaviour.

Per-test schemas: the tests' `options=-csearch_path=<schema>` cannot pass
through pgbouncer 1.18 (refused, or dropped if ignored). Two ways that work:

- `PgBouncer.start(tmp_dir=..., search_path=schema)`: the alias's
  `connect_query` sets search_path on each server connection; a transaction-mode
  bouncer runs no `server_reset_query` between clients, so it stays for the
  connection's life (as an `ALTER ROLE ... SET search_path` would in
  production). Startup is a few milliseconds, so one bouncer per test is cheap.
- `bouncer.scratch_database()`: CREATE DATABASE upstream (~50 ms), use it through
  the `*` entry, and on exit KILL its pooled server connections and DROP it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg

from tests.helpers.ports import free_port

DEFAULT_BINARY = "/usr/sbin/pgbouncer"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
PORT_ATTEMPTS = 5
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def pgbouncer_binary() -> str | None:
    """The pgbouncer executable, or None (`scripts/ensure-pgbouncer` installs it)."""
    found = shutil.which("pgbouncer")
    if found is not None:
        return found
    return DEFAULT_BINARY if os.access(DEFAULT_BINARY, os.X_OK) else None


def _identifier(name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise ValueError(f"not a plain lower-case identifier: {name!r}")
    return name


@dataclass
class PgBouncer:
    """One running pgbouncer; build it with `PgBouncer.start(...)`."""

    port: int
    database: str
    upstream_host: str
    upstream_port: int
    ini_path: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        *,
        tmp_dir: Path,
        upstream_host: str = "127.0.0.1",
        upstream_port: int = 5432,
        database: str = "due_test",
        pool_mode: str = "transaction",
        search_path: str | None = None,
        settings: Mapping[str, str | int] | None = None,
    ) -> Iterator[PgBouncer]:
        """Start pgbouncer, wait until a client gets through to `database`, stop it on exit.

        `search_path` sets the alias's schema on the server side (see the module
        docstring); `settings` adds or overrides `[pgbouncer]` lines.
        """
        binary = pgbouncer_binary()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed: run scripts/ensure-pgbouncer")
        tmp_dir.mkdir(parents=True, exist_ok=True)
        auth_path = tmp_dir / "pgbouncer-users.txt"
        auth_path.write_text('"root" ""\n"postgres" ""\n')
        alias = f"host={upstream_host} port={upstream_port} dbname={_identifier(database)}"
        if search_path is not None:
            alias += f" connect_query='SET search_path TO {_identifier(search_path)}'"
        # Started as root, pgbouncer must be told whom to become (see the docstring).
        command = [binary, *(["-u", "nobody"] if os.geteuid() == 0 else [])]
        log_path = tmp_dir / "pgbouncer.log"
        ini_path = tmp_dir / "pgbouncer.ini"
        last_error = ""
        for _ in range(PORT_ATTEMPTS):
            port = free_port()
            lines = {
                "listen_addr": "127.0.0.1",
                "listen_port": str(port),
                "unix_socket_dir": "",
                "auth_type": "trust",
                "auth_file": str(auth_path),
                "admin_users": "root",
                "pool_mode": pool_mode,
                "max_client_conn": "200",
                "default_pool_size": "20",
                **{key: str(value) for key, value in (settings or {}).items()},
            }
            ini_path.write_text(
                "[databases]\n"
                f"{database} = {alias}\n"
                f"* = host={upstream_host} port={upstream_port}\n"
                "\n[pgbouncer]\n" + "".join(f"{key} = {value}\n" for key, value in lines.items())
            )
            with log_path.open("wb") as log:
                process = subprocess.Popen(
                    [*command, str(ini_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            bouncer = cls(port, database, upstream_host, upstream_port, ini_path, log_path, process)
            try:
                bouncer._wait_until_ready()
            except BaseException:
                bouncer.stop()
                last_error = bouncer.log_text()
                if "Address already in use" in last_error:
                    continue
                raise
            try:
                yield bouncer
            finally:
                bouncer.stop()
            return
        raise RuntimeError(f"pgbouncer found no free port:\n{last_error}")

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"pgbouncer exited with {self.process.returncode}:\n{self.log_text()}"
                )
            try:
                with psycopg.connect(self.url(), connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"pgbouncer did not accept connections: {error}\n{self.log_text()}"
                    ) from error
                time.sleep(0.02)

    def url(self, database: str | None = None, *, user: str = "root", **query: str) -> str:
        """`postgresql://root@127.0.0.1:<port>/<database>?<query>` through this bouncer."""
        url = f"postgresql://{quote(user)}@127.0.0.1:{self.port}/{database or self.database}"
        return f"{url}?{urlencode(query)}" if query else url

    def upstream_url(self, database: str | None = None) -> str:
        """The same database, straight to PostgreSQL (for setup, LISTEN, checks)."""
        host = f"{self.upstream_host}:{self.upstream_port}"
        return f"postgresql://root@{host}/{database or self.database}"

    def admin(self, command: str) -> list[tuple[Any, ...]]:
        """Run an admin-console command (SHOW POOLS, KILL db, ...) and return its rows.

        The console speaks only the simple query protocol: a ClientCursor, no prepare.
        """
        with psycopg.connect(
            self.url("pgbouncer"),
            autocommit=True,
            prepare_threshold=None,
            cursor_factory=psycopg.ClientCursor,
        ) as conn:
            cursor = conn.execute(command)
            return cursor.fetchall() if cursor.description is not None else []

    @contextlib.contextmanager
    def scratch_database(self, name: str | None = None) -> Iterator[str]:
        """A new empty database upstream, yielded as a URL through this bouncer."""
        name = _identifier(name or f"t_{uuid.uuid4().hex[:12]}")
        with psycopg.connect(self.upstream_url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        try:
            yield self.url(name)
        finally:
            # The pool keeps server connections to it; without KILL, DROP waits 5 s and fails.
            with contextlib.suppress(psycopg.Error):
                self.admin(f"KILL {name}")
            with psycopg.connect(self.upstream_url(), autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM (pgbouncer 1.18: immediate shutdown), then SIGKILL if it lingers."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT)
