"""The PostgreSQL store: many hosts, one database, psycopg 3 with a pool.

Claims use `FOR UPDATE SKIP LOCKED` on a partial index of queued rows;
batches of heartbeats and completions are one statement each (arrays through
`unnest`); every statement that makes a job claimable sends a NOTIFY in the
same transaction, so it is delivered exactly when the job becomes visible.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from due.clock import Clock
from due.errors import (
    ConfigurationError,
    JobNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from due.job import AttemptError, Job, JobState
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

QUERIES = load_queries("due.store.postgres")
MIGRATIONS = load_migrations("due.store.postgres")
LATEST_VERSION = MIGRATIONS[-1].version
NOTIFY_CHANNEL = "due_jobs"
BULK_CHUNK = 5000
COPY_TYPES = [
    "int8",
    "text",
    "text",
    "int4",
    "jsonb",
    "timestamptz",
    "int4",
    "text",
    "text",
    "float8",
    "timestamptz",
]  # the columns of copy_jobs, in order


class PostgresStore:
    single_writer = False

    def __init__(
        self,
        url: str,
        clock: Clock,
        *,
        pool_size: int = 10,
        connect_timeout: float = 5.0,
    ) -> None:
        self.url = url
        self._clock = clock
        self._connect_timeout = connect_timeout
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True},
            configure=_configure_connection,
            timeout=connect_timeout,
            open=False,
            name="due",
        )
        self._pool.open(wait=False)

    # --- plumbing -----------------------------------------------------------

    def _now(self) -> datetime | None:
        return self._clock.now()

    @contextlib.contextmanager
    def _cursor(self, transaction: bool = False) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        with translate_errors(self.url), self._pool.connection() as conn:
            if transaction:
                with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                    yield cur
            else:
                with conn.cursor(row_factory=dict_row) as cur:
                    yield cur

    def _all(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        with self._cursor() as cur:
            cur.execute(QUERIES[name], params)
            return cur.fetchall() if cur.description else []

    def close(self) -> None:
        self._pool.close()

    # --- schema ---------------------------------------------------------------

    def migrate(self) -> list[int]:
        applied_now = []
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["lock_migrations"])
            cur.execute(QUERIES["create_migrations_table"])
            cur.execute(QUERIES["schema_version"])
            current = cur.fetchone()["version"] or 0  # type: ignore[index]
            if current > LATEST_VERSION:
                require_current_schema(current, LATEST_VERSION, self._where())
            for migration in MIGRATIONS:
                if migration.version > current:
                    cur.execute(migration.sql.encode())
                    cur.execute(
                        QUERIES["record_migration"],
                        {"version": migration.version, "name": migration.name},
                    )
                    applied_now.append(migration.version)
        return applied_now

    def schema_version(self) -> int | None:
        with self._cursor() as cur:
            cur.execute(QUERIES["migrations_table_exists"])
            if not cur.fetchone()["present"]:  # type: ignore[index]
                return None
            cur.execute(QUERIES["schema_version"])
            version = cur.fetchone()["version"]  # type: ignore[index]
            return int(version) if version is not None else None

    def check_schema(self) -> None:
        require_current_schema(self.schema_version(), LATEST_VERSION, self._where())

    def _where(self) -> str:
        return f"PostgreSQL database {_redact(self.url)}"

    # --- producers ------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Job]:
        if not jobs:
            return []
        plan = steps.enqueue_steps(jobs, self._now(), chunk=BULK_CHUNK, json_column=_jsonb_text)
        if connection is not None:
            _require_sync_psycopg(connection)
            with translate_errors(self.url), connection.cursor(row_factory=dict_row) as cur:
                return _run(cur, plan)
        # One job without a key is one autocommitted statement: no BEGIN/COMMIT trips.
        single = len(jobs) == 1 and jobs[0].key is None
        with self._cursor(transaction=not single) as cur:
            return _run(cur, plan)

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[Job]:
        if not isinstance(connection, psycopg.AsyncConnection):
            raise ConfigurationError(
                "aenqueue(connection=...) takes a psycopg.AsyncConnection for a PostgreSQL app, "
                f"got {type(connection).__name__}"
            )
        plan = steps.enqueue_steps(jobs, self._now(), chunk=BULK_CHUNK, json_column=_jsonb_text)
        async with (
            _atranslate_errors(self.url),
            connection.cursor(row_factory=dict_row) as cur,
        ):
            step = next(plan)
            while True:
                if step.rows is not None:
                    async with cur.copy(QUERIES[step.query]) as copy:
                        copy.set_types(COPY_TYPES)
                        for row in step.rows:
                            await copy.write_row(row)
                    rows = []
                else:
                    await cur.execute(QUERIES[step.query], step.params)
                    rows = await cur.fetchall() if cur.description else []
                try:
                    step = plan.send(_normalise_rows(rows))
                except StopIteration as done:
                    return list(done.value)

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
        return _claimed(self._all("claim_jobs", params))

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
            "tasks": list(tasks) if tasks is not None else None,
            "now": self._now(),
        }

    def heartbeat(self, leases: Sequence[Lease]) -> HeartbeatReply:
        if not leases:
            return HeartbeatReply(frozenset(), frozenset())
        rows = self._all(
            "heartbeat",
            {
                "ids": [lease.job_id for lease in leases],
                "tokens": [lease.lease_token for lease in leases],
                "leases": [float(lease.lease_seconds) for lease in leases],
                "now": self._now(),
            },
        )
        extended = frozenset(row["id"] for row in rows)
        lost = frozenset(lease.job_id for lease in leases) - extended
        return HeartbeatReply(extended, lost)

    def complete(self, completions: Sequence[Completion]) -> set[int]:
        if not completions:
            return set()
        rows = self._all("complete_jobs", self._completion_params(completions))
        return {row["id"] for row in rows}

    def _completion_params(self, completions: Sequence[Completion]) -> dict[str, Any]:
        return {
            "ids": [c.job_id for c in completions],
            "tokens": [c.lease_token for c in completions],
            "states": [c.state.value for c in completions],
            "results": [c.result for c in completions],
            "errors": [c.error_json() for c in completions],
            "retry_ins": [c.retry_in for c in completions],
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
        if not completions:
            return set(), self.claim(queue, limit, worker, lease_seconds, tasks, task_leases)
        claim = self._claim_params(queue, limit, worker, lease_seconds, tasks, task_leases)
        # One round trip and one commit for both: the statements are pipelined.
        with translate_errors(self.url), self._pool.connection() as conn:
            with conn.pipeline(), conn.transaction():
                acks = conn.cursor(row_factory=dict_row)
                acks.execute(QUERIES["complete_jobs"], self._completion_params(completions))
                claims = conn.cursor(row_factory=dict_row)
                claims.execute(QUERIES["claim_jobs"], claim)
            applied = {row["id"] for row in acks.fetchall()}
            rows = claims.fetchall()
        return applied, _claimed(rows)

    def rescue(
        self, limit: int = 1000, max_lost_leases: int = DEFAULT_MAX_LOST_LEASES
    ) -> RescueResult:
        now = self._now()
        if not self._all("any_expired", {"now": now}):
            return RescueResult()
        with self._cursor(transaction=True) as cur:
            cur.execute(QUERIES["select_expired"], {"limit": limit, "now": now})
            expired = cur.fetchall()
            if not expired:
                return RescueResult()
            at = now or _fetch_now(cur)
            verdicts = [
                judge_lost_lease(
                    attempt=row["attempt"],
                    max_attempts=row["max_attempts"],
                    lost_leases=row["lost_leases"],
                    worker=row["worker"],
                    max_lost_leases=max_lost_leases,
                )
                for row in expired
            ]
            cur.execute(
                QUERIES["rescue_jobs"],
                {
                    "ids": [row["id"] for row in expired],
                    "gives_up": [verdict.gives_up for verdict in verdicts],
                    "errors": [
                        attempt_error_json(
                            AttemptError(row["attempt"], verdict.reason, None, at, "lease_lost")
                        )
                        for row, verdict in zip(expired, verdicts, strict=True)
                    ],
                    "now": now,
                },
            )
            rows = cur.fetchall()
        return RescueResult(
            requeued=tuple(row["id"] for row in rows if row["state"] == JobState.QUEUED),
            failed=tuple(row["id"] for row in rows if row["state"] == JobState.FAILED),
        )

    def release(self, leases: Sequence[Lease], reason: str) -> set[int]:
        if not leases:
            return set()
        params = {
            "ids": [lease.job_id for lease in leases],
            "tokens": [lease.lease_token for lease in leases],
            "reason": reason,
            "now": self._now(),
        }
        return {row["id"] for row in self._all("release_jobs", params)}

    def next_due(self, queue: str, tasks: Sequence[str]) -> datetime | None:
        rows = self._all("next_due", {"queue": queue, "tasks": list(tasks)})
        value = rows[0]["run_at"]
        return _utc(value) if value is not None else None

    def fail_unknown_tasks(
        self, queues: Sequence[str], tasks: Sequence[str], grace_seconds: float
    ) -> list[int]:
        rows = self._all(
            "fail_unknown_tasks",
            {
                "queues": list(queues),
                "tasks": list(tasks),
                "grace": float(grace_seconds),
                "grace_text": describe_seconds(grace_seconds),
                "now": self._now(),
            },
        )
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
        self._all("register_worker", params)

    def touch_worker(self, worker: str) -> None:
        self._all("touch_worker", {"id": worker, "now": self._now()})

    def set_worker_state(self, worker: str, state: str) -> None:
        self._all("set_worker_state", {"id": worker, "state": state, "now": self._now()})

    def mark_gone_workers(self, after_seconds: float) -> list[str]:
        rows = self._all("mark_gone_workers", {"after": float(after_seconds), "now": self._now()})
        return [row["id"] for row in rows]

    def list_workers(self, limit: int = 100) -> list[WorkerInfo]:
        return [
            WorkerInfo(**_normalise(row)) for row in self._all("list_workers", {"limit": limit})
        ]

    # --- inspection and control ---------------------------------------------------

    def get(self, job_id: int) -> Job:
        rows = self._all("get_job", {"id": job_id})
        if not rows:
            raise JobNotFoundError(f"no job with id {job_id}")
        return job_from_row(_normalise(rows[0]))

    def list_jobs(self, where: JobFilter) -> list[Job]:
        rows = self._all(
            "list_jobs",
            {
                "queue": where.queue,
                "state": where.state.value if where.state else None,
                "task": where.task,
                "limit": where.limit,
            },
        )
        return [job_from_row(_normalise(row)) for row in rows]

    def cancel(self, job_id: int) -> Job:
        rows = self._all("cancel_job", {"id": job_id, "now": self._now()})
        if rows:
            return job_from_row(_normalise(rows[0]))
        raise refusal(self.get(job_id), "cancel", "only a queued job can be cancelled")

    def retry(self, job_id: int) -> Job:
        rows = self._all("retry_job", {"id": job_id, "now": self._now()})
        if rows:
            return job_from_row(_normalise(rows[0]))
        raise refusal(self.get(job_id), "retry", "only a failed or cancelled job can be retried")

    def due_queues(self) -> list[str]:
        return [row["queue"] for row in self._all("due_queues", {"now": self._now()})]

    def now(self) -> datetime:
        rows = self._all("current_time", {"now": self._now()})
        return _utc(rows[0]["now"])

    # --- for the worker (wake-ups) --------------------------------------------------

    def listen_connection(self) -> psycopg.Connection[Any]:
        """A dedicated autocommit connection (outside the pool) for LISTEN."""
        with translate_errors(self.url):
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            return conn


def _run(cur: psycopg.Cursor[dict[str, Any]], plan: steps.Plan) -> list[Job]:
    step = next(plan)
    while True:
        if step.rows is not None:
            with cur.copy(QUERIES[step.query]) as copy:
                copy.set_types(COPY_TYPES)
                for row in step.rows:
                    copy.write_row(row)
            rows = []
        else:
            cur.execute(QUERIES[step.query], step.params)
            rows = cur.fetchall() if cur.description else []
        try:
            step = plan.send(_normalise_rows(rows))
        except StopIteration as done:
            return list(done.value)


def _jsonb_text(text: str) -> Jsonb:
    """Already-encoded JSON, sent as jsonb without encoding it again."""
    return Jsonb(text, dumps=_unchanged)


def _unchanged(text: str) -> str:
    return text


def _claimed(rows: list[dict[str, Any]]) -> list[ClaimedJob]:
    # Times stay as the connection returns them (aware, UTC): these never leave the worker.
    claimed = [claimed_job_from_row(row) for row in rows]
    claimed.sort(key=lambda job: (-job.priority, job.run_at, job.id))
    return claimed


def _configure_connection(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET TIME ZONE 'UTC'")


def _fetch_now(cur: psycopg.Cursor[dict[str, Any]]) -> datetime:
    cur.execute(QUERIES["current_time"], {"now": None})
    return _utc(cur.fetchone()["now"])  # type: ignore[index]


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _normalise(row: dict[str, Any]) -> dict[str, Any]:
    for name, value in row.items():
        if isinstance(value, datetime):
            row[name] = value.astimezone(UTC)
    return row


def _normalise_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_normalise(row) for row in rows]


def _require_sync_psycopg(connection: Any) -> None:
    if isinstance(connection, psycopg.AsyncConnection):
        raise ConfigurationError(
            "an async psycopg connection needs the async call: "
            "await task.aenqueue(..., connection=conn)"
        )
    if not isinstance(connection, psycopg.Connection):
        raise ConfigurationError(
            "enqueue(connection=...) takes a psycopg.Connection for a PostgreSQL app, "
            f"got {type(connection).__name__}"
        )


def _redact(url: str) -> str:
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparseable URL)"
    host = info.get("host", "localhost")
    return f"{info.get('dbname', '')!s} on {host}:{info.get('port', 5432)}"


@contextlib.contextmanager
def translate_errors(url: str) -> Iterator[None]:
    """Driver errors become StoreErrors, with the original as the cause."""
    try:
        yield
    except psycopg_pool.PoolTimeout as error:
        raise StoreUnavailableError(
            f"could not get a connection to {_redact(url)} in time: {error}"
        ) from error
    except psycopg.OperationalError as error:
        raise StoreUnavailableError(f"{_redact(url)} is unreachable: {error}") from error
    except psycopg.Error as error:
        raise StoreError(f"{_redact(url)}: {error}") from error


@contextlib.asynccontextmanager
async def _atranslate_errors(url: str) -> AsyncIterator[None]:
    with translate_errors(url):
        yield
