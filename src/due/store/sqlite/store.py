"""The SQLite store: the embedded default, one host, any number of processes.

Durability first: WAL with `synchronous=FULL`, because an acknowledged
enqueue is a promise (a power cut must not take it back). Every writing
transaction is `BEGIN IMMEDIATE`, so writers queue on SQLite's single write
lock (bounded by `busy_timeout`) instead of failing halfway; claims are
therefore serialised and no row is ever claimed twice.

Each thread gets its own connection (sqlite3 connections are not shared
across threads); times are stored as REAL Unix seconds and "now" is this
host's clock unless a clock is injected.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from due.clock import Clock
from due.errors import (
    ConfigurationError,
    JobNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from due.job import AttemptError, Job
from due.retry import judge_lost_lease
from due.store import steps
from due.store.protocol import DEFAULT_MAX_LOST_LEASES
from due.store.records import (
    ClaimedJob,
    Completion,
    HeartbeatReply,
    JobFilter,
    Lease,
    NewJob,
    RescueResult,
    WorkerInfo,
    attempt_error_json,
    claimed_job_from_row,
    job_from_row,
    refusal,
)
from due.store.sql import (
    describe_seconds,
    load_migrations,
    load_queries,
    require_current_schema,
)

QUERIES = load_queries("due.store.sqlite")
MIGRATIONS = load_migrations("due.store.sqlite")
LATEST_VERSION = MIGRATIONS[-1].version
DEFAULT_BUSY_TIMEOUT = 30.0
TIME_COLUMNS = ("run_at", "lease_expires_at", "created_at", "started_at", "finished_at")
JSON_COLUMNS = ("payload", "errors", "result")


def path_from_url(url: str) -> str:
    """`sqlite:///relative.db` or `sqlite:////absolute/path.db` → a file path."""
    if not url.startswith("sqlite:///"):
        raise ConfigurationError(
            f"SQLite URL {url!r} must look like sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    path = url[len("sqlite:///") :].split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file::memory:"):
        raise ConfigurationError(
            "an in-memory SQLite database cannot be shared by workers; "
            "give a file path, e.g. sqlite:///due.db"
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigurationError(f"SQLite database folder {directory!r} does not exist")
    return path


class SQLiteStore:
    single_writer = True

    def __init__(
        self, url: str, clock: Clock, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    ) -> None:
        self.url = url
        self.path = path_from_url(url)
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    # --- plumbing -----------------------------------------------------------

    def _now(self) -> float:
        return (self._clock.now() or self._clock.wall()).timestamp()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _open(self) -> sqlite3.Connection:
        with translate_errors(self.path):
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,  # we issue BEGIN IMMEDIATE ourselves
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        return conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        with translate_errors(self.path):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _read(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        with translate_errors(self.path):
            return [dict(row) for row in self._connection().execute(QUERIES[name], params)]

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    # --- schema ---------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied_now = []
        with self._write() as conn:
            conn.execute(QUERIES["create_migrations_table"])
            current = conn.execute(QUERIES["schema_version"]).fetchone()["version"] or 0
            if current > LATEST_VERSION:
                require_current_schema(current, LATEST_VERSION, self._where())
            for migration in MIGRATIONS:
                if migration.version > current:
                    for statement in _statements(migration.sql):
                        conn.execute(statement)
                    conn.execute(
                        QUERIES["record_migration"],
                        {"version": migration.version, "name": migration.name, "now": self._now()},
                    )
                    applied_now.append(migration.version)
        return applied_now

    def schema_version(self) -> int | None:
        if not self._read("migrations_table_exists", {})[0]["present"]:
            return None
        version = self._read("schema_version", {})[0]["version"]
        return int(version) if version is not None else None

    def check_schema(self) -> None:
        require_current_schema(self.schema_version(), LATEST_VERSION, self._where())

    def _where(self) -> str:
        return f"SQLite database {self.path}"

    # --- producers ------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Job]:
        if not jobs:
            return []
        if connection is None and not any(job.key for job in jobs):
            return self._enqueue_batch(jobs)
        plan = steps.enqueue_steps(jobs, self._now(), time_param=_epoch)
        if connection is not None:
            if not isinstance(connection, sqlite3.Connection):
                raise ConfigurationError(
                    "enqueue(connection=...) takes a sqlite3.Connection for a SQLite app, "
                    f"got {type(connection).__name__}"
                )
            with translate_errors(self.path):
                return _run(connection, plan)
        with self._write() as conn:
            return _run(conn, plan)

    def _enqueue_batch(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Jobs without keys: nothing to deduplicate, one (executemany) insert."""
        now = self._now()
        run_ats = [job.run_at.timestamp() if job.run_at else now + job.delay for job in jobs]
        rows = [
            {
                "task": job.task,
                "queue": job.queue,
                "priority": job.priority,
                "payload": job.payload,
                "run_at": run_at,
                "max_attempts": job.max_attempts,
                "unique_for": job.unique_for,
                "now": now,
            }
            for job, run_at in zip(jobs, run_ats, strict=True)
        ]
        with self._write() as conn:
            if len(rows) == 1:
                first = int(conn.execute(QUERIES["insert_jobs"], rows[0]).lastrowid or 0)
            else:
                conn.executemany(QUERIES["insert_jobs"], rows)
                last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
                first = last - len(jobs) + 1
                count = conn.execute(QUERIES["count_id_range"], {"first": first, "last": last})
                if count.fetchone()["n"] != len(jobs):
                    raise StoreError("batch ids were not consecutive; nothing was enqueued")
        created_at = _datetime(now)
        return [
            steps.new_job(job, first + offset, _datetime(run_at), created_at)
            for offset, (job, run_at) in enumerate(zip(jobs, run_ats, strict=True))
        ]

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[Job]:
        raise ConfigurationError(
            "a SQLite app has no async connections; call task.enqueue(..., connection=conn) "
            "with a sqlite3.Connection"
        )

    # --- workers ----------------------------------------------------------------

    def claim(
        self,
        queue: str,
        limit: int,
        worker: str,
        lease_seconds: float,
        tasks: Sequence[str] | None = None,
        task_leases: Mapping[str, float] | None = None,
    ) -> list[ClaimedJob]:
        params = self._claim_params(queue, limit, worker, lease_seconds, tasks, task_leases)
        with self._write() as conn:
            rows = conn.execute(QUERIES["claim_jobs"], params).fetchall()
        return _claimed(rows)

    def _claim_params(
        self,
        queue: str,
        limit: int,
        worker: str,
        lease_seconds: float,
        tasks: Sequence[str] | None,
        task_leases: Mapping[str, float] | None,
    ) -> dict[str, Any]:
        return {
            "queue": queue,
            "limit": limit,
            "worker": worker,
            "lease": float(lease_seconds),
            "leases": json.dumps(dict(task_leases or {})),
            "tasks": json.dumps(list(tasks)) if tasks is not None else None,
            "now": self._now(),
        }

    def complete_and_claim(
        self,
        completions: Sequence[Completion],
        queue: str,
        limit: int,
        worker: str,
        lease_seconds: float,
        tasks: Sequence[str] | None = None,
        task_leases: Mapping[str, float] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        """Both in one write transaction: one commit (one fsync) instead of two."""
        params = self._claim_params(queue, limit, worker, lease_seconds, tasks, task_leases)
        with self._write() as conn:
            applied = self._complete_in(conn, completions, params["now"])
            rows = conn.execute(QUERIES["claim_jobs"], params).fetchall()
        return applied, _claimed(rows)

    def heartbeat(self, leases: Sequence[Lease]) -> HeartbeatReply:
        if not leases:
            return HeartbeatReply(frozenset(), frozenset())
        now = self._now()
        extended = set()
        with self._write() as conn:
            for lease in leases:
                params = {
                    "id": lease.job_id,
                    "token": lease.lease_token,
                    "lease": float(lease.lease_seconds),
                    "now": now,
                }
                if conn.execute(QUERIES["heartbeat"], params).fetchone():
                    extended.add(lease.job_id)
        lost = {lease.job_id for lease in leases} - extended
        return HeartbeatReply(frozenset(extended), frozenset(lost))

    def complete(self, completions: Sequence[Completion]) -> set[int]:
        if not completions:
            return set()
        with self._write() as conn:
            return self._complete_in(conn, completions, self._now())

    def _complete_in(
        self, conn: sqlite3.Connection, completions: Sequence[Completion], now: float
    ) -> set[int]:
        applied = set()
        for completion in completions:
            params = {
                "id": completion.job_id,
                "token": completion.lease_token,
                "state": completion.state.value,
                "result": completion.result,
                "error": completion.error_json(),
                "retry_in": completion.retry_in,
                "now": now,
            }
            if conn.execute(QUERIES["complete_jobs"], params).fetchone():
                applied.add(completion.job_id)
        return applied

    def rescue(
        self, limit: int = 1000, max_lost_leases: int = DEFAULT_MAX_LOST_LEASES
    ) -> RescueResult:
        now = self._now()
        requeued: list[int] = []
        failed: list[int] = []
        if not self._read("any_expired", {"now": now}):
            return RescueResult()  # the common case, without taking the write lock
        with self._write() as conn:
            expired = conn.execute(QUERIES["select_expired"], {"limit": limit, "now": now})
            for row in expired.fetchall():
                verdict = judge_lost_lease(
                    attempt=row["attempt"],
                    max_attempts=row["max_attempts"],
                    lost_leases=row["lost_leases"],
                    worker=row["worker"],
                    max_lost_leases=max_lost_leases,
                )
                error = AttemptError(
                    row["attempt"], verdict.reason, None, _datetime(now), "lease_lost"
                )
                params = {
                    "id": row["id"],
                    "gives_up": verdict.gives_up,
                    "error": attempt_error_json(error),
                    "now": now,
                }
                conn.execute(QUERIES["rescue_jobs"], params).fetchall()
                (failed if verdict.gives_up else requeued).append(row["id"])
        return RescueResult(requeued=tuple(requeued), failed=tuple(failed))

    def release(self, leases: Sequence[Lease], reason: str) -> set[int]:
        if not leases:
            return set()
        now = self._now()
        released = set()
        with self._write() as conn:
            for lease in leases:
                params = {
                    "id": lease.job_id,
                    "token": lease.lease_token,
                    "reason": reason,
                    "now": now,
                    "now_iso": _datetime(now).isoformat(),
                }
                if conn.execute(QUERIES["release_jobs"], params).fetchone():
                    released.add(lease.job_id)
        return released

    def next_due(self, queue: str, tasks: Sequence[str]) -> datetime | None:
        rows = self._read("next_due", {"queue": queue, "tasks": json.dumps(list(tasks))})
        value = rows[0]["run_at"]
        return _datetime(value) if value is not None else None

    def fail_unknown_tasks(
        self, queues: Sequence[str], tasks: Sequence[str], grace_seconds: float
    ) -> list[int]:
        now = self._now()
        params = {
            "queues": json.dumps(list(queues)),
            "tasks": json.dumps(list(tasks)),
            "grace": float(grace_seconds),
            "grace_text": describe_seconds(grace_seconds),
            "now": now,
            "now_iso": _datetime(now).isoformat(),
        }
        with self._write() as conn:
            rows = conn.execute(QUERIES["fail_unknown_tasks"], params).fetchall()
        return [row["id"] for row in rows]

    # --- worker registry ----------------------------------------------------------

    def register_worker(self, worker: str, host: str, pid: int, queues: Mapping[str, int]) -> None:
        params = {
            "id": worker,
            "host": host,
            "pid": pid,
            "queues": json.dumps(dict(queues)),
            "now": self._now(),
        }
        with self._write() as conn:
            conn.execute(QUERIES["register_worker"], params)

    def touch_worker(self, worker: str) -> None:
        with self._write() as conn:
            conn.execute(QUERIES["touch_worker"], {"id": worker, "now": self._now()})

    def set_worker_state(self, worker: str, state: str) -> None:
        with self._write() as conn:
            params = {"id": worker, "state": state, "now": self._now()}
            conn.execute(QUERIES["set_worker_state"], params)

    def mark_gone_workers(self, after_seconds: float) -> list[str]:
        with self._write() as conn:
            params = {"after": float(after_seconds), "now": self._now()}
            rows = conn.execute(QUERIES["mark_gone_workers"], params).fetchall()
        return [row["id"] for row in rows]

    def list_workers(self, limit: int = 100) -> list[WorkerInfo]:
        workers = []
        for row in self._read("list_workers", {"limit": limit}):
            row["queues"] = json.loads(row["queues"])
            for name in ("started_at", "last_seen_at", "stopped_at"):
                if row[name] is not None:
                    row[name] = _datetime(row[name])
            workers.append(WorkerInfo(**row))
        return workers

    # --- inspection and control ---------------------------------------------------

    def get(self, job_id: int) -> Job:
        rows = self._read("get_job", {"id": job_id})
        if not rows:
            raise JobNotFoundError(f"no job with id {job_id}")
        return job_from_row(_python_row(rows[0]))

    def list_jobs(self, where: JobFilter) -> list[Job]:
        rows = self._read(
            "list_jobs",
            {
                "queue": where.queue,
                "state": where.state.value if where.state else None,
                "task": where.task,
                "limit": where.limit,
            },
        )
        return [job_from_row(_python_row(row)) for row in rows]

    def cancel(self, job_id: int) -> Job:
        with self._write() as conn:
            row = conn.execute(QUERIES["cancel_job"], {"id": job_id, "now": self._now()}).fetchone()
        if row:
            return job_from_row(_python_row(dict(row)))
        raise refusal(self.get(job_id), "cancel", "only a queued job can be cancelled")

    def retry(self, job_id: int) -> Job:
        with self._write() as conn:
            row = conn.execute(QUERIES["retry_job"], {"id": job_id, "now": self._now()}).fetchone()
        if row:
            return job_from_row(_python_row(dict(row)))
        raise refusal(self.get(job_id), "retry", "only a failed or cancelled job can be retried")

    def due_queues(self) -> list[str]:
        return [row["queue"] for row in self._read("due_queues", {"now": self._now()})]

    def now(self) -> datetime:
        return _datetime(self._now())

    # --- for the worker (wake-ups) --------------------------------------------------

    def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap wake-up check."""
        with translate_errors(self.path):
            return int(self._connection().execute("PRAGMA data_version").fetchone()[0])


def _run(conn: sqlite3.Connection, plan: steps.Plan) -> list[Job]:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row  # a caller's connection may have any row factory
    step = next(plan)
    while True:
        cursor.execute(QUERIES[step.query], step.params)
        rows = [_python_row(dict(row)) for row in cursor.fetchall()] if cursor.description else []
        try:
            step = plan.send(rows)
        except StopIteration as done:
            return list(done.value)


def _statements(script: str) -> list[str]:
    """Split a migration into statements, as SQLite's own tokenizer sees them."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip(" \n") and not all(
        row.strip().startswith("--") or not row.strip() for row in pending.splitlines()
    ):
        raise RuntimeError(f"migration ends with an incomplete statement: {pending[:80]!r}")
    return statements


def _claimed(rows: list[sqlite3.Row]) -> list[ClaimedJob]:
    claimed = [claimed_job_from_row(_python_row(dict(row))) for row in rows]
    claimed.sort(key=lambda job: (-job.priority, job.run_at, job.id))
    return claimed


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _datetime(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _python_row(row: dict[str, Any]) -> dict[str, Any]:
    for name in TIME_COLUMNS:
        if row.get(name) is not None:
            row[name] = _datetime(row[name])
    for name in JSON_COLUMNS:
        if row.get(name) is not None:
            row[name] = json.loads(row[name])
    return row


@contextlib.contextmanager
def translate_errors(path: str) -> Iterator[None]:
    """Driver errors become StoreErrors, with the original as the cause."""
    try:
        yield
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            raise StoreUnavailableError(
                f"SQLite database {path} stayed locked by another writer: {error}"
            ) from error
        raise StoreError(f"SQLite database {path}: {error}") from error
    except sqlite3.Error as error:
        raise StoreError(f"SQLite database {path}: {error}") from error
