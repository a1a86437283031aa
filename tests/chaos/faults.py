"""Faults at random moments, each one logged with its time and its target.

Process faults: SIGKILL (restarted at once), SIGSTOP then SIGCONT a few seconds
later (longer than a lease, often), SIGTERM (a graceful restart), SIGKILL of
the scheduler's leader. Database faults: on PostgreSQL, a restart of the
server and `pg_terminate_backend` of every session, both on a cluster started
for the run (tests/helpers/private_postgres.py: the machine's shared server,
which every other test run uses, is never restarted nor its sessions ended),
and a frozen TCP path between one worker and the database (a proxy that stops
passing bytes), and a claim's reply lost after its commit (the same proxy
breaks the connection); on SQLite, another process holding the write lock for
seconds.
Clock faults, on PostgreSQL: the wall clock of a running worker steps an
hour ahead, and back at the next such fault (an NTP step, a resumed VM); the
statements it sends a second (counted by the proxy it reaches the database
through) before and after each step say whether its loops kept their pace.
On SQLite the host's clock is the database's, one for every process: a step
of one process's clock alone is a clock that differs from the others', which
SQLite does not support (docs/explanation/guarantees.md).
"""

from __future__ import annotations

import random
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from due.store.sqlite.backend import path_from_url
from tests.chaos.deployment import Deployment, Slot
from tests.helpers.private_postgres import PrivatePostgres
from tests.helpers.proxy import FreezableProxy


@dataclass(frozen=True)
class Fault:
    kind: str
    at: float
    pid: int | None = None
    seconds: float = 0.0
    """How long it lasted (a pause, a freeze, a lock held), or how far a clock stepped."""


STEP_SECONDS = 3600.0
MAX_PAUSE_SECONDS = 4.0
"""The longest a SIGSTOP lasts."""
PACE_BEFORE_SECONDS = 2.0
PACE_AFTER_SECONDS = 5.0
"""How long the stepped worker's statements are counted before and after a step."""


class Injector:
    """Applies a fault every so often (exponential gaps, `rate` a second)."""

    def __init__(
        self,
        deployment: Deployment,
        url: str,
        rate: float,
        kinds: list[str],
        proxy: FreezableProxy | None = None,
        seed: int = 0,
        server: PrivatePostgres | None = None,
    ) -> None:
        if server is None and set(kinds) & set(SERVER_FAULTS):
            raise ValueError(
                f"{', '.join(sorted(set(kinds) & set(SERVER_FAULTS)))} act on a whole "
                "server: give the injector a private cluster (server=, "
                "tests/helpers/private_postgres.py), never the shared one"
            )
        self.deployment = deployment
        self.url = url
        self.rate = rate
        self.kinds = kinds
        self.proxy = proxy
        self.server = server
        """The cluster of this run's own that the server faults act on."""
        self.random = random.Random(seed)
        self.log: list[Fault] = []
        self.step_pace: list[tuple[float, float, float, float]] = []
        """The stepped worker's steps: (when, seconds, statements a second before, after)."""
        self.step_proxy: FreezableProxy | None = None
        """The proxy the steppable worker reaches the database through (it counts)."""
        self._stepping = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-faults", daemon=True)
        self._timers: list[threading.Thread] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No more faults; undo the ones still going (a pause, a freeze)."""
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(30)
        for timer in self._timers:
            timer.join(30)

    def landed(self) -> set[str]:
        """The kinds that have landed at least once (not those that failed or
        found no target: no worker alive, the leader paused)."""
        return {fault.kind for fault in self.log}

    def _run(self) -> None:
        """Rounds of every kind in a shuffled order, so a short run sees each one;
        a round begins with the kinds that have not landed yet (one found no
        target, or failed, on a loaded machine)."""
        round_: list[str] = []
        while not self._stop.wait(self.random.expovariate(self.rate)):
            if not round_:
                shuffled = self.random.sample(self.kinds, len(self.kinds))
                landed = self.landed()  # popped from the end: those not landed first
                round_ = sorted(shuffled, key=lambda kind: kind not in landed)
            kind = round_.pop()
            try:
                getattr(self, f"_{kind}")()
            except Exception as error:  # a fault that could not land is noted, not fatal
                self._record(f"{kind} (failed: {type(error).__name__})", None)
            self.deployment.restart_dead()

    def _later(self, seconds: float, action: Callable[[], None]) -> None:
        def run() -> None:
            self._stop.wait(seconds)
            action()

        timer = threading.Thread(target=run, daemon=True)
        self._timers.append(timer)
        timer.start()

    def _victim(self) -> Slot | None:
        alive = [slot for slot in self.deployment.alive() if not slot.paused]
        return self.random.choice(alive) if alive else None

    def _record(self, kind: str, pid: int | None, seconds: float = 0.0) -> Fault:
        fault = Fault(kind, time.time(), pid, seconds)
        self.log.append(fault)
        return fault

    # --- process faults -----------------------------------------------------------

    def _kill(self) -> None:
        slot = self._victim()
        if slot is not None:
            self._record("kill", self.deployment.signal(slot, signal.SIGKILL))

    def _pause(self) -> None:
        slot = self._victim()
        if slot is None:
            return
        seconds = self.random.uniform(1.0, MAX_PAUSE_SECONDS)
        slot.paused = True
        self._record("pause", self.deployment.signal(slot, signal.SIGSTOP), seconds)

        def resume() -> None:
            self.deployment.signal(slot, signal.SIGCONT)
            slot.paused = False

        self._later(seconds, resume)

    def _term(self) -> None:
        slot = self._victim()
        if slot is not None:
            self._record("term", self.deployment.signal(slot, signal.SIGTERM))

    def _kill_leader(self) -> None:
        pid = leader_pid(self.url)
        slot = self.deployment.slot_of(pid) if pid else None
        if slot is not None and not slot.paused:
            self._record("kill_leader", self.deployment.signal(slot, signal.SIGKILL))

    # --- clock faults ------------------------------------------------------------------

    def _clock_step(self) -> None:
        """The steppable worker's wall clock an hour ahead, or back if it is ahead:
        in the background, its statements counted before and after (one at a time)."""
        slot = next((s for s in self.deployment.slots if s.clock_file is not None), None)
        if slot is None or slot.paused or slot not in self.deployment.alive() or self._stepping:
            return
        self._stepping = True
        self._later(0, lambda: self._step_watched(slot))

    def _step_watched(self, slot: Slot) -> None:
        try:
            before = self._statements_a_second(PACE_BEFORE_SECONDS)  # (stopped: it steps still)
            ahead = bool(slot.offsets) and slot.offsets[-1][1] > 0
            step = -STEP_SECONDS if ahead else STEP_SECONDS
            self.deployment.step_clock(slot, step)
            fault = self._record("clock_step", self.deployment.worker_pid(slot), step)
            after = self._statements_a_second(PACE_AFTER_SECONDS)
            if before is not None and after is not None:
                self.step_pace.append((fault.at, step, before, after))
        finally:
            self._stepping = False

    def _statements_a_second(self, seconds: float) -> float | None:
        """The steppable worker's statements a second over the next `seconds` (None
        without a counting proxy, or when the run stopped meanwhile)."""
        proxy = self.step_proxy
        started, sent = time.monotonic(), proxy.sent if proxy else 0
        if self._stop.wait(seconds) or proxy is None:
            return None
        return (proxy.sent - sent) / (time.monotonic() - started)

    # --- database faults -------------------------------------------------------------

    def _restart_postgres(self) -> None:
        """pg_ctl restart of the run's own cluster (fast: every session ended)."""
        assert self.server is not None  # (checked in __init__)
        started = time.time()
        self.server.restart()
        self._record("restart_postgres", None, time.time() - started)

    def _terminate_connections(self) -> None:
        """pg_terminate_backend of every session of the run's own cluster."""
        assert self.server is not None  # (checked in __init__)
        ended = self.server.terminate_sessions()
        self._record("terminate_connections", None, float(ended))

    def _freeze(self) -> None:
        if self.proxy is None:
            return
        seconds = self.random.uniform(2.0, 5.0)
        self.proxy.freeze()
        self._record("freeze", self.deployment.worker_pid(self.deployment.slots[0]), seconds)
        self._later(seconds, self.proxy.thaw)

    def _cut_claim_reply(self) -> None:
        """The next claim through the proxy that claims a job loses its reply: the
        connection breaks after the server committed it (the worker never sees
        the job: it must go back without spending an attempt)."""
        if self.proxy is None:
            return
        self.proxy.cut_next_claim()
        self._record("cut_claim_reply", self.deployment.worker_pid(self.deployment.slots[0]))

    def _hold_write_lock(self) -> None:
        """Another process's long write transaction (here a thread of ours, on its
        own connection: to SQLite it is just another writer)."""
        seconds = self.random.uniform(1.0, 3.0)
        self._record("hold_write_lock", None, seconds)

        def hold() -> None:
            conn = sqlite3.connect(path_from_url(self.url), timeout=30, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                self._stop.wait(seconds)
                conn.execute("ROLLBACK")
            finally:
                conn.close()

        holder = threading.Thread(target=hold, daemon=True)
        self._timers.append(holder)
        holder.start()


def leader_pid(url: str) -> int | None:
    """The pid in the holder of the scheduler's leader lease (`host:pid:random`)."""
    query = "SELECT holder FROM due_leases WHERE name = 'scheduler'"
    if url.startswith("sqlite"):
        with sqlite3.connect(path_from_url(url)) as conn:
            row = conn.execute(query).fetchone()
    else:
        with psycopg.connect(url) as pg:
            row = pg.execute(query).fetchone()
    if row is None:
        return None
    parts = str(row[0]).split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


PROCESS_FAULTS = ["kill", "pause", "term", "kill_leader"]
SERVER_FAULTS = ["terminate_connections", "restart_postgres"]
"""What acts on a whole PostgreSQL server: only ever a private cluster."""
POSTGRES_FAULTS = [
    *PROCESS_FAULTS,
    "terminate_connections",
    "freeze",
    "restart_postgres",
    "cut_claim_reply",
    "clock_step",
]
SQLITE_FAULTS = [*PROCESS_FAULTS, "hold_write_lock"]
