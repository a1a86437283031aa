"""The pure parts of the worker's self-care: the probes' answers on a moved
clock, the memory limit's sizes, the recycler's count (the processes:
tests/process/test_worker_care.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

import due
from due.worker.health import HealthServer, Probes
from due.worker.recycling import Recycler, parse_size
from due.worker.settings import WorkerSettings


@dataclass
class Beats:
    round_ended_at: float | None = None
    reached_at: float | None = None


def test_probes_follow_the_heartbeats_and_the_phase(clock: due.FakeClock) -> None:
    beats = Beats()
    probes = Probes(beats=beats, clock=clock, lease=10.0, stale_after=30.0)
    assert probes.livez() == (200, "ok: starting")
    assert probes.readyz() == (503, "not claiming: starting")
    probes.phase = "running"
    beats.round_ended_at = beats.reached_at = clock.monotonic()
    assert probes.livez() == probes.readyz() == (200, "ok")
    clock.advance("11s")  # the database silent for more than a lease: not ready, still alive
    beats.round_ended_at = clock.monotonic()
    assert probes.readyz()[0] == 503 and "database" in probes.readyz()[1]
    assert probes.livez() == (200, "ok")
    clock.advance("31s")  # no heartbeat round at all: the loop is stuck
    assert probes.livez()[0] == 503
    probes.phase = "draining"
    assert probes.readyz() == (503, "not claiming: draining")


def test_a_health_port_in_use_is_refused_with_what_to_do(clock: due.FakeClock) -> None:
    async def serve_twice() -> None:
        probes = Probes(beats=Beats(), clock=clock, lease=10.0, stale_after=30.0)
        first = HealthServer(probes, 0, host="127.0.0.1")
        await first.start()
        try:
            await HealthServer(probes, first.port, host="127.0.0.1").start()
        finally:
            await first.stop()

    with pytest.raises(
        due.ConfigurationError, match=r"--health-port \d+: cannot listen.*free port"
    ):
        asyncio.run(serve_twice())


@pytest.mark.parametrize(
    ("text", "size"),
    [("500MB", 500_000_000), ("512MiB", 512 * 2**20), ("1.5 GB", 1_500_000_000), ("2Gi", 2**31)],
)
def test_memory_sizes(text: str, size: int) -> None:
    assert parse_size(text, "max memory") == size


@pytest.mark.parametrize("text", ["500 parsecs", "lots", "100KB", "-5MB"])
def test_a_bad_memory_size_is_refused_with_what_to_give(text: str) -> None:
    with pytest.raises(due.ConfigurationError, match="max memory"):
        WorkerSettings.build({"default": 1}, max_memory=text)


def test_the_job_that_reaches_the_count_recycles_once() -> None:
    reasons: list[str] = []
    recycler = Recycler(max_jobs=2, max_memory=None, recycle=reasons.append, memory=lambda: 0)
    for _ in range(3):
        recycler.job_started()
    assert reasons == ["jobs"] and recycler.reason == "jobs"


def test_memory_recycles_only_after_a_job() -> None:
    """A process that starts past its limit would be replaced by one as big."""
    reasons: list[str] = []
    recycler = Recycler(
        max_jobs=None, max_memory=10**8, recycle=reasons.append, memory=lambda: 2 * 10**8
    )
    assert asyncio.run(recycler.run_once()) is None
    recycler.job_started()
    assert asyncio.run(recycler.run_once()) == "memory" and reasons == ["memory"]
