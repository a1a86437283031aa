"""Worker settings, validated at construction, with named defaults."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field

from due.core.records import DEFAULT_MAX_LOST_LEASES, Retention
from due.durations import DurationLike, to_seconds
from due.errors import ConfigurationError, InvalidJobError
from due.request import validate_queue
from due.task import MIN_LEASE_SECONDS
from due.worker.clock_watch import DEFAULT_CLOCK_INTERVAL
from due.worker.event_loop import DEFAULT_LOOP, loop_factory
from due.worker.recycling import parse_size

DEFAULT_CONCURRENCY = 10
DEFAULT_LEASE_SECONDS = 10.0
DEFAULT_GRACE_SECONDS = 30.0
DEFAULT_UNKNOWN_TASK_GRACE_SECONDS = 3600.0
MAX_CLAIM_BATCH = 1000


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


@dataclass(frozen=True)
class WorkerSettings:
    queues: dict[str, int]
    """Queue name → how many of its jobs this process runs at once."""
    lease: float = DEFAULT_LEASE_SECONDS
    grace: float = DEFAULT_GRACE_SECONDS
    unknown_task_grace: float = DEFAULT_UNKNOWN_TASK_GRACE_SECONDS
    max_lost_leases: int = DEFAULT_MAX_LOST_LEASES
    rescue_interval: float = 1.0
    """How often this worker looks for expired leases (cheap, idempotent)."""
    poll_interval: float = 2.0
    """Longest sleep without a wake-up: covers a lost notification."""
    flush_interval: float = 0.002
    """How long an acknowledgement may wait to share a batch."""
    clock_interval: float = DEFAULT_CLOCK_INTERVAL
    """How often the database's clock is read again (clock_watch.py)."""
    db_threads: int = 4
    worker_id: str = field(default_factory=default_worker_id)
    scheduler: bool = True
    """Run the scheduler in this process (it acts only while it holds the leader lease)."""
    leader_url: str | None = None
    """Where the leader lease lives: None for the database, or redis://..."""
    leader_ttl: float = 10.0
    retention: Retention = field(default_factory=Retention)
    """The leader prunes finished jobs older than their outcome's retention
    (schedule history: the longer of the two)."""
    event_loop: str = DEFAULT_LOOP
    """`auto` (uvloop when installed), `asyncio` or `uvloop` (event_loop.py)."""
    max_jobs: int | None = None
    """Recycle the process once it has run this many jobs (recycling.py)."""
    max_memory: int | None = None
    """Recycle the process once its resident memory passes this many bytes."""
    health_port: int | None = None
    """Serve /livez and /readyz on this port (health.py); 0: any free port."""

    @classmethod
    def build(
        cls,
        queues: dict[str, int],
        *,
        lease: DurationLike = DEFAULT_LEASE_SECONDS,
        grace: DurationLike = DEFAULT_GRACE_SECONDS,
        unknown_task_grace: DurationLike = DEFAULT_UNKNOWN_TASK_GRACE_SECONDS,
        max_lost_leases: int = DEFAULT_MAX_LOST_LEASES,
        retention: DurationLike | None = None,
        retention_succeeded: DurationLike | None = None,
        retention_failed: DurationLike | None = None,
        leader_ttl: DurationLike = 10.0,
        max_jobs: int | None = None,
        max_memory: str | int | None = None,
        health_port: int | None = None,
        **options: object,
    ) -> WorkerSettings:
        if not queues and not options.get("scheduler", True):
            raise ConfigurationError("a worker needs at least one queue to serve")
        for name, concurrency in queues.items():
            try:
                validate_queue(name)
            except InvalidJobError as error:
                raise ConfigurationError(str(error)) from None
            if not isinstance(concurrency, int) or concurrency < 1:
                raise ConfigurationError(
                    f"queue {name!r}: concurrency must be a whole number >= 1, got {concurrency!r}"
                )
        lease_seconds = to_seconds(lease, what="worker lease")
        if lease_seconds < MIN_LEASE_SECONDS:
            raise ConfigurationError(
                f"worker lease of {lease_seconds:g}s is too short; "
                f"the minimum is {MIN_LEASE_SECONDS:g}s"
            )
        grace_seconds = to_seconds(grace, what="worker grace")
        if not isinstance(max_lost_leases, int) or max_lost_leases < 1:
            raise ConfigurationError("max_lost_leases must be a whole number >= 1")
        loop_factory(str(options.get("event_loop", DEFAULT_LOOP)))  # refused at construction
        if max_jobs is not None and (not isinstance(max_jobs, int) or max_jobs < 1):
            raise ConfigurationError(f"max jobs per process must be >= 1, got {max_jobs!r}")
        if health_port is not None and not 0 <= health_port <= 65535:
            raise ConfigurationError(f"health port must be 0-65535, got {health_port!r}")
        return cls(
            queues=dict(queues),
            lease=lease_seconds,
            grace=grace_seconds,
            unknown_task_grace=to_seconds(unknown_task_grace, what="unknown task grace"),
            max_lost_leases=max_lost_leases,
            retention=_retention(retention, retention_succeeded, retention_failed),
            leader_ttl=_leader_ttl(leader_ttl),
            max_jobs=max_jobs,
            max_memory=None
            if max_memory is None
            else parse_size(max_memory, "max memory per process"),
            health_port=health_port,
            **options,  # type: ignore[arg-type]
        )

    @property
    def total_concurrency(self) -> int:
        return max(1, sum(self.queues.values()))

    @property
    def heartbeat_interval(self) -> float:
        return self.lease / 3

    @property
    def gone_after(self) -> float:
        """Another worker silent this long is marked gone by this one: 3 of this
        worker's leases, and at least 10 s (`due workers --help` says so)."""
        return max(3 * self.lease, 10.0)


def _retention(
    both: DurationLike | None, succeeded: DurationLike | None, failed: DurationLike | None
) -> Retention:
    """Per outcome; `both` (the older single setting) stands for whichever is not given."""
    default = Retention()
    if both is not None:
        default = Retention(*(2 * (to_seconds(both, what="retention"),)))
    return Retention(
        succeeded=default.succeeded
        if succeeded is None
        else to_seconds(succeeded, what="retention of succeeded jobs"),
        failed=default.failed
        if failed is None
        else to_seconds(failed, what="retention of failed and cancelled jobs"),
    )


def _leader_ttl(value: DurationLike) -> float:
    seconds = to_seconds(value, what="leader lease ttl")
    if seconds < MIN_LEASE_SECONDS:
        raise ConfigurationError(
            f"leader lease of {seconds:g}s is too short; the minimum is {MIN_LEASE_SECONDS:g}s"
        )
    return seconds
