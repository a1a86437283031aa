"""`due worker --processes N`: N worker processes, restarted when one dies.

The supervisor runs each worker as `python -m due worker ...` (same options,
one process each). A child that exits while the supervisor is not stopping
is started again — at once the first time, then with a backoff while it keeps
dying young — so one host uses all its cores and a crashed process is back in
seconds. Children run in their own process group, so a terminal's Ctrl-C
reaches only the supervisor, which forwards every SIGTERM/SIGINT to each child
(the second one makes them release their jobs at once); it exits 0 once all
of them have exited. A child whose supervisor disappears stops by itself
(it watches its parent pid).

A child that recycled itself (`--max-jobs-per-process`,
`--max-memory-per-process`: it drained and exited with RECYCLE_EXIT_CODE,
recycling.py) is replaced at once, however young, and counted
(`supervisor.child_recycled`, with the total so far).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from types import FrameType

from due.clock import SystemClock
from due.logs import event
from due.worker.recycling import RECYCLE_EXIT_CODE

log = logging.getLogger("due.supervisor")
SUPERVISOR_ENVIRONMENT_VARIABLE = "DUE_SUPERVISOR_PID"
SLOT_ENVIRONMENT_VARIABLE = "DUE_WORKER_SLOT"
"""The child's place, 0 to processes - 1: its health port is --health-port + slot."""
YOUNG_SECONDS = 5.0
MAX_RESTART_DELAY = 10.0
POLL_SECONDS = 0.1


@dataclass
class Child:
    slot: int
    process: subprocess.Popen[bytes]
    started: float
    restart_delay: float = 0.0


class Supervisor:
    def __init__(self, command: list[str], processes: int) -> None:
        self.command = command
        self.processes = processes
        self.children: list[Child] = []
        self.clock = SystemClock()
        self.recycled = 0
        self._stop = threading.Event()
        self._first_signal: int | None = None
        self._told: set[int] = set()
        """The pids the first stop signal was forwarded to."""

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.children = [self._spawn(slot, 0.0) for slot in range(self.processes)]
        event(log, "supervisor.started", processes=self.processes, pid=os.getpid())
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(POLL_SECONDS)
        self._tell_the_late()
        for child in self.children:
            child.process.wait()
        event(log, "supervisor.stopped")
        return 0

    def run_once(self) -> int:
        """Restart the children that died; returns how many."""
        restarted = 0
        for index, child in enumerate(self.children):
            code = child.process.poll()
            if code is not None and not self._stop.is_set():
                self.children[index] = self._restart(child, code)
                restarted += 1
        return restarted

    def _spawn(self, slot: int, restart_delay: float) -> Child:
        environment = {
            **os.environ,
            SUPERVISOR_ENVIRONMENT_VARIABLE: str(os.getpid()),
            SLOT_ENVIRONMENT_VARIABLE: str(slot),
        }
        process = subprocess.Popen(self.command, env=environment, process_group=0)
        event(log, "supervisor.child_started", slot=slot, pid=process.pid)
        return Child(slot, process, self.clock.monotonic(), restart_delay)

    def _restart(self, child: Child, code: int) -> Child:
        lived = self.clock.monotonic() - child.started
        if code == RECYCLE_EXIT_CODE:
            self.recycled += 1
            event(
                log,
                "supervisor.child_recycled",
                slot=child.slot,
                pid=child.process.pid,
                lived=round(lived, 1),
                recycled=self.recycled,
            )
            return self._spawn(child.slot, 0.0)
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        delay = 0.0
        if lived < YOUNG_SECONDS:
            delay = min(max(child.restart_delay * 2, 0.5), MAX_RESTART_DELAY)
        event(
            log,
            "supervisor.child_died",
            logging.WARNING,
            slot=child.slot,
            pid=child.process.pid,
            how=how,
            lived=round(lived, 1),
            restart_in=delay,
        )
        if delay and self._stop.wait(delay):
            return child
        return self._spawn(child.slot, delay)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop.set()
        if self._first_signal is None:
            self._first_signal = signum
        for child in self.children:
            self._forward(child, signum)

    def _tell_the_late(self) -> None:
        """Forward the stop to a child started as it came: the signal handler
        runs between two statements of the loop, and a child whose restart was
        under way then (started, not yet in `children`) heard nothing, and would
        keep the supervisor waiting on it."""
        assert self._first_signal is not None
        for child in self.children:
            if child.process.pid not in self._told:
                self._forward(child, self._first_signal)

    def _forward(self, child: Child, signum: int) -> None:
        if child.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signum)
        self._told.add(child.process.pid)
