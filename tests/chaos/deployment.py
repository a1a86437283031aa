"""A real deployment on this machine: worker processes (each with its scheduler)
started with the `due` command, restarted when killed, watched through their logs.

One worker may run with its wall clock an hour ahead from the start (`skew`,
under `faketime`), and one with a wall clock the harness steps while it runs
(`steppable`: libfaketime preloaded, its offset read from a file the harness
rewrites, as an NTP step or a resumed VM moves a host's clock).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from due.worker.supervisor import SUPERVISOR_ENVIRONMENT_VARIABLE
from tests.helpers.workers import REPOSITORY

CHAOS_APP = "tests.chaos.chaos_app:app"
SKEW = "+1h"
SKEW_SECONDS = 3600.0
LEASE = "2s"
STEP_READ_SECONDS = 1
"""How often a steppable worker's libfaketime reads its offset file again."""
WORKER_OPTIONS = [
    *("--lease", LEASE, "--grace", "2s", "--leader-ttl", LEASE),
    *("--log-format", "json", "-q", "default=8", "-q", "pieces=4", "-q", "burst=50"),
]


@dataclass
class Slot:
    """One worker's place: the process now in it, and every process it had."""

    number: int
    url: str
    skewed: bool = False
    """Its processes run with their wall clock an hour ahead (faketime)."""
    process: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    paused: bool = False
    clock_file: Path | None = None
    """Its processes' wall clock offset, read by libfaketime (`steppable`)."""
    offsets: list[tuple[float, float]] = field(default_factory=list)
    """(true time, offset in seconds) at each step of its wall clock."""

    def true_time(self, ts: float) -> float:
        """A time read from this slot's wall clock, as the true time."""
        if self.skewed:
            return ts - SKEW_SECONDS
        if not self.offsets:
            return ts
        return ts - min(self.offsets, key=lambda o: self._misfit(ts, o))[1]

    def _misfit(self, ts: float, offset: tuple[float, float]) -> float:
        """How far `ts`, read with that offset, falls from when that offset held
        (offsets an hour apart, steps seconds apart: the right one fits; no line
        was written in the future)."""
        since = offset[0]
        later = [at for at, _ in self.offsets if at > since]
        until = min(later, default=time.time())
        true = ts - offset[1]
        return max(since - true, true - until, 0.0)


class Deployment:
    def __init__(self, url: str, folder: Path, workers: int, ledger: Path) -> None:
        self.url = url
        self.folder = folder
        self.ledger = ledger
        self.fixes = folder / "fixes.txt"
        """Workflows fixed before an operator retried them (tests/chaos/flow_load.py)."""
        self.slots = [Slot(number, url) for number in range(workers)]

    def skew(self, slot: int) -> None:
        """Run this slot's processes with their wall clock an hour ahead (libfaketime)."""
        self.slots[slot].skewed = True

    def steppable(self, slot: int) -> None:
        """Run this slot's processes with a wall clock `step_clock` moves."""
        chosen = self.slots[slot]
        chosen.clock_file = self.folder / f"clock-{slot}.faketime"
        self._write_offset(chosen, 0.0)

    def step_clock(self, slot: Slot, seconds: float) -> float:
        """Step the slot's wall clock (its running process's, and the next ones');
        returns the new offset. libfaketime reads it within STEP_READ_SECONDS."""
        offset = (slot.offsets[-1][1] if slot.offsets else 0.0) + seconds
        self._write_offset(slot, offset)
        return offset

    def _write_offset(self, slot: Slot, offset: float) -> None:
        assert slot.clock_file is not None
        written = slot.clock_file.with_suffix(".new")
        written.write_text(f"{offset:+.0f}\n")
        written.replace(slot.clock_file)  # whole: never read half written
        slot.offsets.append((time.time(), offset))

    def route(self, slot: int, url: str) -> None:
        """Start this slot's processes with another database URL (through a proxy)."""
        self.slots[slot].url = url

    def start_all(self) -> None:
        """Start every slot not started yet."""
        for slot in self.slots:
            if slot.process is None:
                self.start(slot)

    def start(self, slot: Slot) -> None:
        environment = {
            **os.environ,
            "DUE_DATABASE_URL": slot.url,
            "DUE_CHAOS_LEDGER": str(self.ledger),
            "DUE_CHAOS_FIXES": str(self.fixes),
            "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "src")]),
        }
        command = [sys.executable, "-m", "due", "worker", "--app", CHAOS_APP, *WORKER_OPTIONS]
        if not slot.skewed:
            # A worker whose parent is gone stops itself: a harness killed outright
            # (a test's timeout) leaves nothing running. (Under faketime the parent
            # is faketime's own process.)
            environment[SUPERVISOR_ENVIRONMENT_VARIABLE] = str(os.getpid())
        if slot.skewed or slot.clock_file is not None:
            # The wall clock only: libfaketime's fake monotonic clock stops Python's
            # timed waits from ever timing out (threading, and so the pools).
            environment["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        if slot.skewed:
            command = ["faketime", "-f", SKEW, *command]
        elif slot.clock_file is not None:
            environment.pop("FAKETIME", None)  # it would win over the file
            environment |= {
                "LD_PRELOAD": libfaketime(),
                "FAKETIME_TIMESTAMP_FILE": str(slot.clock_file),
                "FAKETIME_CACHE_DURATION": str(STEP_READ_SECONDS),
            }
        log = open(self.log_path(slot, len(slot.pids)), "wb")  # noqa: SIM115 - the child's
        with log:
            slot.process = subprocess.Popen(
                command,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPOSITORY,
                start_new_session=True,
            )
        slot.pids.append(slot.process.pid)
        slot.paused = False

    def skewed_pids(self) -> set[int]:
        return {
            self.worker_pid(slot, n)
            for slot in self.slots
            if slot.skewed
            for n in range(len(slot.pids))
        }

    def worker_pid(self, slot: Slot, generation: int | None = None) -> int:
        """The pid of the worker itself (under faketime, the process it started),
        read from its `worker.started` line; the process's own pid until then."""
        generation = len(slot.pids) - 1 if generation is None else generation
        path = self.log_path(slot, generation)
        text = path.read_text(errors="replace") if path.exists() else ""
        for line in text.splitlines():
            if '"worker.started"' in line:
                with contextlib.suppress(json.JSONDecodeError, ValueError, IndexError):
                    return int(str(json.loads(line)["worker"]).split(":")[-2])
        return slot.pids[generation]

    def log_path(self, slot: Slot, generation: int) -> Path:
        return self.folder / f"worker-{slot.number}-{generation}.log"

    def signal(self, slot: Slot, signum: int) -> int | None:
        """Signal the slot's process group; returns the worker's pid."""
        process = slot.process
        if process is None or process.poll() is not None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        return self.worker_pid(slot)

    def restart_dead(self) -> None:
        """Start again every slot whose process exited (killed, or stopped by SIGTERM)."""
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is not None:
                self.start(slot)

    def alive(self) -> list[Slot]:
        return [s for s in self.slots if s.process is not None and s.process.poll() is None]

    def slot_of(self, pid: int) -> Slot | None:
        return next((s for s in self.alive() if self.worker_pid(s) == pid), None)

    def stop_all(self, timeout: float = 30.0) -> dict[int, int | None]:
        """SIGTERM every worker (after a SIGCONT); their exit codes by pid."""
        codes: dict[int, int | None] = {}
        for slot in self.alive():
            self.signal(slot, signal.SIGCONT)
            self.signal(slot, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for slot in self.slots:
            if slot.process is None:
                continue
            try:
                codes[slot.process.pid] = slot.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.signal(slot, signal.SIGKILL)
                codes[slot.process.pid] = None
        return codes

    def kill_all(self) -> None:
        """SIGKILL every process group ever started, its leader alive or not: a
        worker under faketime outlives a killed faketime process."""
        for slot in self.slots:
            for group in slot.pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGCONT)
                    os.killpg(group, signal.SIGKILL)

    def events(self, name: str) -> list[dict[str, Any]]:
        """Every log event of that name, from every worker process that ran, its
        `ts` in true time (a skewed or stepped worker's own clock is off)."""
        found = []
        for slot in self.slots:
            for generation in range(len(slot.pids)):
                path = self.log_path(slot, generation)
                text = path.read_text(errors="replace") if path.exists() else ""
                for line in text.splitlines():
                    if f'"{name}"' not in line:
                        continue
                    with contextlib.suppress(json.JSONDecodeError):
                        record = json.loads(line)
                        if record.get("event") == name:
                            found.append({**record, "ts": slot.true_time(record["ts"])})
        return found


def libfaketime() -> str:
    """The preload library of Debian's faketime (scripts/ensure-faketime)."""
    patterns = ("/usr/lib/*/faketime", "/usr/lib*/faketime", "/usr/local/lib/faketime")
    found = [path for p in patterns for path in glob.glob(f"{p}/libfaketime.so.1")]
    if not found:
        raise RuntimeError("libfaketime is missing: run scripts/ensure-faketime")
    return found[0]
