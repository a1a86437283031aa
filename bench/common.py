"""Shared measuring code for the due benchmark: due, its peers and the bare limit loops.

Standard library only (psycopg is imported lazily by the PostgreSQL helpers), so every
adapter can import it whatever virtual environment runs it.

An adapter is a subclass of `Adapter` (how to create its database, enqueue, count rows and
run one worker); `main(AdapterClass)` turns it into the CLI described in bench/README.md
("Adapter contract"): `enqueue`, `drain`, `latency`, `rescue`, plus the internal `worker`.
Each measurement prints one JSON line (`emit`) to stdout.

What really ran is read from the effects log, not from the queue: the instrumented job
body (`run_job_sync` / `run_job_async`) appends one line when it starts and one when it
ends (O_APPEND, one write each, no fsync):

    S <ref> <time.time()> <pid> <t_ref>      t_ref = enqueue time or scheduled time
    E <ref> <time.time()> <pid>
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import os
import queue
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

BENCH_DIR = Path(__file__).resolve().parent
SCRATCH = os.environ.get("DUE_BENCH_SCRATCH")
"""A folder for a run kept apart from the measured ones (the test suite's smoke
runs): its work files and results go there, and its PostgreSQL databases are
named due_bench_scratch_<hash of the folder>_..., so a smoke run never
recreates the database of a `make bench` or `make soak` running meanwhile, nor
of another smoke run, nor adds to their results."""
WORK_DIR = Path(SCRATCH) / "work" if SCRATCH else BENCH_DIR / "work"
RESULTS_DIR = Path(SCRATCH) / "results" if SCRATCH else BENCH_DIR / "results"
PG_SERVER = os.environ.get("DUE_BENCH_PG", "postgresql://root@127.0.0.1:5432")
PG_PREFIX = "due_bench_"


def scratch_db_prefix(folder: str) -> str:
    """The names of the databases of a run apart in `folder` start with this."""
    return f"{PG_PREFIX}scratch_{hashlib.sha256(folder.encode()).hexdigest()[:10]}_"


DB_PREFIX = scratch_db_prefix(SCRATCH) if SCRATCH else PG_PREFIX
"""Of this run's databases (PG_PREFIX: of every benchmark database)."""

EFFECTS_ENV = "DUE_BENCH_EFFECTS"
PARENT_ENV = "DUE_BENCH_PARENT"
MAX_SECONDS_ENV = "DUE_BENCH_MAX_SECONDS"
WORKER_MAX_SECONDS = 900.0

TESTS = ("enqueue", "drain", "latency", "rescue")
TASK_SLEEP = {"noop": 0.0, "sleep10": 0.01}
CHUNK = 1000
SIDE_BY_SIDE = 50
"""Enqueue, side by side: coroutines of one event loop, each enqueuing one job
at a time with the library's async API (the requests an async web server
handles at once)."""


class NotSupportedError(Exception):
    """The library has no way to do what the measurement asks (e.g. no batch enqueue)."""


# --------------------------------------------------------------------------- effects log


_effects_fd: int | None = None
_effects_pid: int | None = None


def _effects_out() -> int:
    """The effects file descriptor of this process (reopened after a fork)."""
    global _effects_fd, _effects_pid  # noqa: PLW0603 - one cached fd per process
    if _effects_fd is None or _effects_pid != os.getpid():
        path = os.environ.get(EFFECTS_ENV) or str(WORK_DIR / "effects" / "default.log")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _effects_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _effects_pid = os.getpid()
    return _effects_fd


def effect_start(ref: str, t_ref: float) -> None:
    os.write(_effects_out(), f"S {ref} {time.time()!r} {os.getpid()} {t_ref!r}\n".encode())


def effect_end(ref: str) -> None:
    os.write(_effects_out(), f"E {ref} {time.time()!r} {os.getpid()}\n".encode())


def run_job_sync(ref: str, t_ref: float, sleep_s: float) -> None:
    """The benchmark job body for synchronous task code."""
    effect_start(ref, t_ref)
    if sleep_s:
        time.sleep(sleep_s)
    effect_end(ref)


async def run_job_async(ref: str, t_ref: float, sleep_s: float) -> None:
    """The benchmark job body for async task code."""
    effect_start(ref, t_ref)
    if sleep_s:
        await asyncio.sleep(sleep_s)
    effect_end(ref)


@dataclass(frozen=True)
class Start:
    t: float
    pid: int
    t_ref: float


@dataclass
class EffectsLog:
    """Incremental reader of an effects log (tolerates a half-written last line)."""

    path: Path
    starts: dict[str, list[Start]] = field(default_factory=dict)
    ends: dict[str, list[float]] = field(default_factory=dict)
    _offset: int = 0
    _tail: bytes = b""

    @classmethod
    def fresh(cls, path: Path) -> EffectsLog:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.touch()
        return cls(path)

    def poll(self) -> None:
        with self.path.open("rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        self._offset += len(data)
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        for line in lines:
            self._parse(line.decode().split())

    def _parse(self, parts: list[str]) -> None:
        if len(parts) == 5 and parts[0] == "S":
            start = Start(float(parts[2]), int(parts[3]), float(parts[4]))
            self.starts.setdefault(parts[1], []).append(start)
        elif len(parts) == 4 and parts[0] == "E":
            self.ends.setdefault(parts[1], []).append(float(parts[2]))

    def started(self, refs: Sequence[str]) -> int:
        return sum(1 for ref in refs if ref in self.starts)

    def ended(self, refs: Sequence[str]) -> int:
        return sum(1 for ref in refs if ref in self.ends)


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear-interpolated percentile (p in 0..100); None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def jobs_per_s(n: int, seconds: float) -> float | None:
    return n / seconds if seconds > 0 else None


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Median, min and max of values over runs."""
    return {
        "median": median(values),
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }


def ms_summary(values_ms: Sequence[float]) -> dict[str, float | None]:
    return {
        "p50_ms": percentile(values_ms, 50),
        "p95_ms": percentile(values_ms, 95),
        "p99_ms": percentile(values_ms, 99),
        "max_ms": max(values_ms) if values_ms else None,
        "min_ms": min(values_ms) if values_ms else None,
    }


# --------------------------------------------------------------------------- waiting


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    interval: float = 0.05,
    abort: Callable[[], bool] | None = None,
) -> bool:
    """Poll predicate until true (True) or timeout / abort (False). Never waits longer."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline or (abort is not None and abort()):
            return False
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def sleep_until(t_wall: float) -> None:
    delay = t_wall - time.time()
    if delay > 0:
        time.sleep(delay)


# --------------------------------------------------------------------------- processes


def spawn(cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start cmd in its own process group (session), output appended to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )


def spawn_due_worker(
    module: str, url_variable: str, url: str, log_path: Path, *options: str
) -> subprocess.Popen[bytes]:
    """`due worker --app <module>:app <options>` for the due-only benchmarks: the
    module (in bench/) builds its `app` from the URL in `url_variable`."""
    cmd = [sys.executable, "-m", "due", "worker", "--app", f"{module}:app", *options]
    bench_dir = str(Path(__file__).parent)
    return spawn(cmd, log_path, {url_variable: url, "PYTHONPATH": bench_dir})


def stop_due_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a graceful stop), SIGKILL after 30 s."""
    kill_group(proc, signal.SIGTERM, timeout=30)


def kill_group(
    proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL, timeout: float = 10
) -> None:
    """Signal proc's whole process group, then wait (bounded); SIGKILL if still alive."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    with suppress(ProcessLookupError):  # stragglers of the group (e.g. forked children)
        os.killpg(proc.pid, signal.SIGKILL)


class Workers:
    """Context manager: every worker spawned through it is SIGKILLed (group) on exit."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, cmd: list[str], log_path: Path, effects: Path) -> subprocess.Popen[bytes]:
        env = {EFFECTS_ENV: str(effects), PARENT_ENV: str(os.getpid())}
        proc = spawn(cmd, log_path, env)
        self.procs.append(proc)
        return proc

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            kill_group(proc)


def exit_on_sigterm() -> None:
    """Turn SIGTERM/SIGHUP into SystemExit so `finally` / `with` blocks kill the workers."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def start_watchdog() -> None:
    """In a worker: exit when the driver that spawned it is gone, or after a hard cap."""
    parent = int(os.environ.get(PARENT_ENV, "0") or 0)
    max_s = float(os.environ.get(MAX_SECONDS_ENV, WORKER_MAX_SECONDS))
    t_end = time.monotonic() + max_s

    def watch() -> None:
        while True:
            orphaned = parent and os.getppid() != parent
            if orphaned or time.monotonic() > t_end:
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=watch, name="bench-watchdog", daemon=True).start()


# --------------------------------------------------------------------------- databases


def pg_url(db: str) -> str:
    return f"{PG_SERVER}/{db}"


def recreate_pg_db(db: str) -> None:
    """Drop and create a benchmark database (only names starting with due_bench_)."""
    import psycopg  # lazy: common.py must import without psycopg

    if not db.startswith(PG_PREFIX) or not db.replace("_", "").isalnum():
        raise ValueError(f"refusing to recreate database {db!r}")
    with psycopg.connect(pg_url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db}"')


def pg_execute(db: str, sql: str) -> None:
    import psycopg  # lazy: common.py must import without psycopg

    with psycopg.connect(pg_url(db), autocommit=True) as conn:
        conn.execute(sql)


def pg_scalar(db: str, sql: str) -> Any:
    import psycopg  # lazy: common.py must import without psycopg

    with psycopg.connect(pg_url(db), autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    return row[0] if row else None


def pg_row(db: str, sql: str) -> tuple[Any, ...]:
    import psycopg  # lazy: common.py must import without psycopg

    with psycopg.connect(pg_url(db), autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None, sql
    return tuple(row)


def fresh_due_url(backend: str, name: str) -> str:
    """An empty database for a due-only benchmark: <WORK_DIR>/db/<name>.db, or
    the PostgreSQL database <DB_PREFIX>due_<name>, recreated."""
    if backend == "sqlite":
        return f"sqlite:///{fresh_sqlite_path(WORK_DIR / 'db' / f'{name}.db')}"
    recreate_pg_db(f"{DB_PREFIX}due_{name}")
    return pg_url(f"{DB_PREFIX}due_{name}")


def fresh_sqlite_path(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def sqlite_scalar(path: str, sql: str) -> Any:
    conn = sqlite3.connect(path, timeout=10)
    try:
        row = conn.execute(sql).fetchone()
    finally:
        conn.close()
    return row[0] if row else None


# --------------------------------------------------------------------------- jobs & adapters


@dataclass(frozen=True)
class Job:
    """What every benchmark job carries: a unique ref, a reference time, a sleep."""

    ref: str
    t_ref: float = 0.0
    sleep_s: float = 0.0

    def as_json(self) -> str:
        return json.dumps([self.ref, self.t_ref, self.sleep_s])

    @staticmethod
    def from_json(data: str | bytes) -> Job:
        ref, t_ref, sleep_s = json.loads(data)
        return Job(str(ref), float(t_ref), float(sleep_s))


class Adapter:
    """One library on one backend. Subclasses fill in the library-specific parts."""

    lib: ClassVar[str] = "?"
    backends: ClassVar[tuple[str, ...]] = ("postgres",)
    tests: ClassVar[frozenset[str]] = frozenset(TESTS)
    has_bulk: ClassVar[bool] = True
    has_async_enqueue: ClassVar[bool] = False
    """`enqueue_many(..., "side_by_side")`: one-job async enqueues, SIDE_BY_SIDE at once."""
    has_schedule: ClassVar[bool] = True
    default_concurrency: ClassVar[int | None] = None
    rescue_note: ClassVar[str] = ""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.backend: str = args.backend or self.backends[0]
        if self.backend not in self.backends:
            raise SystemExit(f"{self.lib}: backend {self.backend!r} not in {self.backends}")
        self.db: str = args.db or ""

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Extra library-specific options (also passed on to the worker)."""

    # -- identity
    def version(self) -> str:
        return ""

    def variant(self) -> str:
        """Suffix naming a non-default variant (own database and effects log)."""
        return ""

    def setting(self, concurrency: int | None) -> str:
        return "default" if concurrency is None else f"concurrency={concurrency}"

    def label(self, test: str) -> str:
        return f"{self.lib}_{self.backend}_{test}{self.variant()}"

    def db_name(self, test: str) -> str:
        if self.backend == "postgres":
            return f"{DB_PREFIX}{self.lib}_{test}{self.variant()}".lower()
        return str(WORK_DIR / "db" / f"{self.label(test)}.sqlite3")

    # -- driver side
    def create_db(self) -> None:
        """Create self.db from scratch with the library's schema."""
        raise NotImplementedError

    def open(self) -> None:
        """Open the driver's client (after create_db)."""

    def close(self) -> None:
        """Close the driver's client."""

    def enqueue_many(self, jobs: Sequence[Job], mode: str) -> None:
        """mode single: one call (own transaction) per job; bulk: batch API, CHUNK per call;
        side_by_side: one-job async calls, SIDE_BY_SIDE coroutines at once (side_by_side())."""
        raise NotImplementedError

    def enqueue_one(self, job: Job, run_at: float | None = None) -> None:
        """One job, now or scheduled at the wall-clock time run_at."""
        raise NotImplementedError

    def count_rows(self) -> int:
        """Jobs stored in the database (enqueue check)."""
        raise NotImplementedError

    def count_acknowledged(self, enqueued: int) -> int | None:
        """Of the `enqueued` jobs, how many the database shows done (the honest end
        of a drain: acknowledged, not merely run); None when the library keeps no
        such record."""
        return None

    def scalar(self, sql: str) -> Any:
        """One value from the library's database (SQLite file or PostgreSQL)."""
        if self.backend == "postgres":
            return pg_scalar(self.db, sql)
        return sqlite_scalar(self.db, sql)

    def queue_state(self) -> dict[str, Any]:
        """What the library's tables hold (reported after a rescue; optional)."""
        return {}

    # -- worker side
    def worker_args(self) -> list[str]:
        """Extra CLI flags the worker needs (library-specific options)."""
        return []

    def worker_command(self, concurrency: int | None) -> list[str] | None:
        """A command line for one worker, or None: this script's own `worker` subcommand."""
        return None

    def run_worker(self, concurrency: int | None) -> None:
        """Run one worker in this process until killed."""
        raise NotImplementedError


# --------------------------------------------------------------------------- results


def record(
    adapter: Adapter,
    test: str,
    *,
    n: int,
    value: float | None,
    unit: str,
    setting: str,
    ok: bool,
    **extra: Any,
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "lib": adapter.lib,
        "backend": adapter.backend,
        "test": test,
        "setting": setting,
        "n": n,
        "value": value,
        "unit": unit,
        "ok": ok,
    }
    rec.update(extra)
    rec["version"] = adapter.version()
    rec["ts"] = round(time.time(), 3)
    return rec


def emit(rec: dict[str, Any]) -> None:
    """One JSON line per result on stdout (the only thing adapters print there)."""
    print(json.dumps(rec), flush=True)


def save(rec: dict[str, Any]) -> None:
    """A due-only benchmark's result: a JSON line on stdout and in results.jsonl."""
    line = json.dumps(rec)
    print(line, flush=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with (RESULTS_DIR / "results.jsonl").open("a") as out:
        out.write(line + "\n")


# --------------------------------------------------------------------------- measures


@dataclass
class Session:
    """One measurement's database, effects log and worker bookkeeping."""

    adapter: Adapter
    test: str
    effects: EffectsLog
    workers: Workers

    def worker_cmd(self, concurrency: int | None) -> list[str]:
        custom = self.adapter.worker_command(concurrency)
        if custom:
            return custom
        cmd = [sys.executable, str(Path(sys.argv[0]).resolve()), "worker"]
        cmd += ["--backend", self.adapter.backend, "--db", self.adapter.db]
        if concurrency is not None:
            cmd += ["--concurrency", str(concurrency)]
        return cmd + self.adapter.worker_args()

    def spawn_worker(self, concurrency: int | None, name: str) -> subprocess.Popen[bytes]:
        log = WORK_DIR / "logs" / f"{self.adapter.label(self.test)}-{name}.log"
        return self.workers.spawn(self.worker_cmd(concurrency), log, self.effects.path)

    def wait_ended(
        self,
        refs: Sequence[str],
        timeout: float,
        proc: subprocess.Popen[bytes] | None = None,
        interval: float = 0.1,
    ) -> bool:
        def done() -> bool:
            self.effects.poll()
            # Counting every ref is O(n): only once enough refs have ended at all.
            return len(self.effects.ends) >= len(refs) and self.effects.ended(refs) >= len(refs)

        def died() -> bool:
            return proc is not None and proc.poll() is not None

        return wait_until(done, timeout, interval=interval, abort=died)

    def wait_any_started(
        self, timeout: float, proc: subprocess.Popen[bytes], interval: float = 0.1
    ) -> bool:
        def seen() -> bool:
            self.effects.poll()
            return bool(self.effects.starts)

        return wait_until(seen, timeout, interval=interval, abort=lambda: proc.poll() is not None)

    def wait_started(self, ref: str, count: int, timeout: float) -> bool:
        def seen() -> bool:
            self.effects.poll()
            return len(self.effects.starts.get(ref, [])) >= count

        return wait_until(seen, timeout)


def make_jobs(prefix: str, n: int, sleep_s: float = 0.0) -> list[Job]:
    return [Job(f"{prefix}{i}", 0.0, sleep_s) for i in range(n)]


async def side_by_side(
    jobs: Sequence[Job], enqueue: Callable[[Job], Any], coroutines: int = SIDE_BY_SIDE
) -> None:
    """`await enqueue(job)` for every job, from `coroutines` coroutines of this loop."""

    async def one_after_another(share: Sequence[Job]) -> None:
        for job in share:
            await enqueue(job)

    await asyncio.gather(*(one_after_another(jobs[k::coroutines]) for k in range(coroutines)))


def measure_enqueue(adapter: Adapter, mode: str, n: int) -> dict[str, Any]:
    if mode == "bulk" and not adapter.has_bulk:
        raise NotSupportedError(f"{adapter.lib} has no batch enqueue API")
    if mode == "side_by_side" and not adapter.has_async_enqueue:
        raise NotSupportedError(f"{adapter.lib} has no async enqueue API")
    jobs = make_jobs("q", n)
    t0 = time.perf_counter()
    adapter.enqueue_many(jobs, mode)
    seconds = time.perf_counter() - t0
    rows = adapter.count_rows()
    return record(
        adapter,
        "enqueue",
        n=n,
        value=jobs_per_s(n, seconds),
        unit="jobs/s",
        setting=mode,
        ok=rows == n,
        mode=mode,
        values={"seconds": seconds},
        checks={"rows_in_db": rows},
    )


def drain_checks(effects: EffectsLog, refs: Sequence[str]) -> dict[str, int]:
    ended = sum(1 for r in refs if r in effects.ends)
    return {
        "distinct": ended,
        "duplicates": sum(1 for r in refs if len(effects.starts.get(r, [])) > 1),
        "missing": len(refs) - ended,
    }


def drain_values(effects: EffectsLog, refs: Sequence[str], t_spawn: float) -> dict[str, Any]:
    starts = [s.t for r in refs for s in effects.starts.get(r, [])]
    ends = [e for r in refs for e in effects.ends.get(r, [])]
    if not starts or not ends:
        return {"jobs_per_s": None, "jobs_per_s_from_spawn": None, "startup_s": None}
    done = sum(1 for r in refs if r in effects.ends)
    return {
        "jobs_per_s": jobs_per_s(done, max(ends) - min(starts)),
        "jobs_per_s_from_spawn": jobs_per_s(done, max(ends) - t_spawn),
        "startup_s": min(starts) - t_spawn,
        "seconds": max(ends) - min(starts),
    }


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def side_by_side_processes(
    target: Callable[..., None], arguments: Sequence[tuple[Any, ...]], timeout: float = 300.0
) -> tuple[float, list[Any]]:
    """A process for each tuple of `arguments` (spawned: nothing of this process's
    state), each calling `target(*arguments, start, results)`: it waits at `start`
    (a barrier) and puts one result in `results`. Returns the seconds from the
    barrier's release to the last result, and the results. A process that exits
    without its result fails the run at once; any left at the end is stopped."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(len(arguments) + 1)
    results = context.Queue()
    children = [context.Process(target=target, args=(*args, start, results)) for args in arguments]
    try:
        for child in children:
            child.start()
        start.wait(timeout=120)
        began, deadline = time.perf_counter(), time.monotonic() + timeout
        found: list[Any] = []
        while len(found) < len(children):
            try:
                found.append(results.get(timeout=0.5))
            except queue.Empty:
                failed = [child.exitcode for child in children if child.exitcode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    raise SystemExit(
                        f"processes side by side: exit codes {failed or 'none'}, "
                        f"{len(found)} of {len(children)} results"
                    ) from None
        return time.perf_counter() - began, found
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.terminate()
                child.join(timeout=5)


def process_tree(pid: int) -> list[int]:
    """pid and its descendants, as /proc lists each thread's children."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    todo += [int(child) for child in children.read().split()]
    return found


def cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU time of these processes (all their threads), and of their
    children that have exited and been reaped. Counting the reaped children keeps the
    sum of a process tree from falling when one of its processes exits between two
    reads: its time moves into its parent's (a PostgreSQL backend's into the
    postmaster's), and is not lost."""
    total = 0.0
    for pid in pids:
        with suppress(OSError):
            total += _process_cpu_seconds(pid)
    return total


def _process_cpu_seconds(pid: int) -> float:
    """One process's CPU time and its reaped children's. /proc's stat counts in clock
    ticks (10 ms), each process's rounded down: a quick drain's server, a few
    connections of a few milliseconds each, read as nothing. A process of one
    thread (every PostgreSQL process) is read in nanoseconds from its schedstat
    instead; one of several threads keeps the ticks, which include its threads that
    have exited (a schedstat per live thread would lose them)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    own, reaped = fields[11:13], fields[13:15]  # utime, stime; cutime, cstime
    threads = int(fields[17])
    if threads == 1:
        with open(f"/proc/{pid}/schedstat") as schedstat:
            running_ns = int(schedstat.read().split()[0])
        return running_ns / 1e9 + sum(map(int, reaped)) / CLOCK_TICKS
    return sum(map(int, own + reaped)) / CLOCK_TICKS


def postmaster_pid(db: str) -> int | None:
    """The local PostgreSQL server's main process (its backends are its children);
    None if the server is not on this machine."""
    import psycopg  # lazy: common.py must import without psycopg

    # Read while the connection is open: once it closes, its backend exits, and
    # a /proc read that lost that race took the server for a remote one (a
    # timers bench run without the server's CPU, 2026-12-04).
    with psycopg.connect(pg_url(db), autocommit=True) as conn:
        backend = conn.info.backend_pid
        try:
            with open(f"/proc/{backend}/stat") as stat:
                return int(stat.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return None


class CpuMeter:
    """CPU time of the worker's processes and of the database server's, read from
    /proc between two instants: a cost per job, which the machine's noise moves
    less than it moves a rate. The server's includes its background processes
    (WAL writer, autovacuum): costs of the work too."""

    def __init__(self, worker: subprocess.Popen[bytes], server: int | None) -> None:
        self.worker = worker.pid
        self.server = server
        self.start = self.read()

    def read(self) -> tuple[float, float]:
        server = cpu_seconds(process_tree(self.server)) if self.server is not None else 0.0
        return cpu_seconds(process_tree(self.worker)), server

    def per_job_us(self, n: int) -> dict[str, float | None]:
        """Microseconds of CPU per job since the meter started."""
        worker, server = self.read()
        return {
            "worker_cpu_us": round((worker - self.start[0]) / n * 1e6, 1),
            "server_cpu_us": (
                round((server - self.start[1]) / n * 1e6, 1) if self.server is not None else None
            ),
        }


def settle(adapter: Adapter) -> None:
    """After a prefill on PostgreSQL, VACUUM ANALYZE (untimed): the state autovacuum gives a
    live database; without planner statistics some libraries' claim queries degrade."""
    if adapter.backend == "postgres":
        pg_execute(adapter.db, "VACUUM ANALYZE")


ACK_POLL_SECONDS = 0.02


def wait_acknowledged(
    adapter: Adapter, n: int, timeout: float, proc: subprocess.Popen[bytes]
) -> float | None:
    """When the database first showed all `n` jobs done (time.time()), polled every
    20 ms from outside the worker; None if the library records no such thing or
    it did not happen in time. Called once every body has ended: no job is
    acknowledged before its body ends, and a count every 20 ms during the drain
    would load the server the worker shares (a count over 60,000 rows of
    due_jobs took 20 ms: the poll alone kept half a core busy)."""
    if adapter.count_acknowledged(n) is None:
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if (adapter.count_acknowledged(n) or 0) >= n:
            return time.time()
        time.sleep(ACK_POLL_SECONDS)
    return None


def measure_drain(
    s: Session, task: str, n: int, concurrency: int | None, timeout: float
) -> dict[str, Any]:
    adapter = s.adapter
    jobs = make_jobs("d", n, TASK_SLEEP[task])
    adapter.enqueue_many(jobs, "bulk" if adapter.has_bulk else "single")
    rows_before = adapter.count_rows()
    settle(adapter)
    refs = [j.ref for j in jobs]
    # Found before the worker starts: a connection to find it, made once the first
    # job has started, kept the meter from a quick drain's first claims.
    server = postmaster_pid(adapter.db) if adapter.backend == "postgres" else None
    t_spawn = time.time()
    worker = s.spawn_worker(concurrency, "A")
    deadline = time.monotonic() + timeout
    # The CPU counted from the first job's start: the worker's start-up (imports,
    # connections) is not the drain's.
    s.wait_any_started(timeout, worker, interval=ACK_POLL_SECONDS)
    meter = CpuMeter(worker, server)
    in_time = s.wait_ended(refs, timeout, worker, interval=ACK_POLL_SECONDS)
    acked_at = wait_acknowledged(adapter, n, max(deadline - time.monotonic(), 1.0), worker)
    cpu = meter.per_job_us(n)
    time.sleep(0.3)  # let a late duplicate land
    s.effects.poll()
    kill_group(worker)
    checks = drain_checks(s.effects, refs)
    values = drain_values(s.effects, refs, t_spawn)
    # The honest figure: to the last acknowledgement the database shows; the
    # body-timed one (to the last job body's end) stays as a second column.
    values["jobs_per_s_body"] = values["jobs_per_s"]
    values["acknowledged"] = acked_at is not None
    values.update(cpu)
    if acked_at is not None and values.get("seconds") is not None:
        starts = [st.t for r in refs for st in s.effects.starts.get(r, [])]
        first_start = min(starts) if starts else t_spawn
        values["jobs_per_s"] = jobs_per_s(n, acked_at - first_start)
        values["ack_lag_s"] = round(acked_at - (first_start + values["seconds"]), 3)
    return record(
        adapter,
        "drain",
        n=n,
        value=values["jobs_per_s"],
        unit="jobs/s",
        setting=adapter.setting(concurrency),
        ok=in_time and checks["missing"] == 0 and checks["duplicates"] == 0,
        task=task,
        concurrency=concurrency,
        values=values,
        checks={
            **checks,
            "rows_before": rows_before,
            "completed_in_time": in_time,
            "vacuum_analyze": adapter.backend == "postgres",
        },
    )


def warm_up(s: Session, timeout: float = 60.0) -> bool:
    """Enqueue one job and wait until it has run (worker started and connected)."""
    s.adapter.enqueue_one(Job("warm", time.time()))
    return s.wait_ended(["warm"], timeout)


def delays_ms(s: Session, refs: Sequence[str]) -> list[float]:
    """start - t_ref (first start of each job) in ms."""
    out = []
    for ref in refs:
        starts = s.effects.starts.get(ref)
        if starts:
            first = min(starts, key=lambda st: st.t)
            out.append((first.t - first.t_ref) * 1000.0)
    return out


def timed_series(s: Session, prefix: str, n: int, gap_s: float, ahead_s: float) -> list[str]:
    """Enqueue n jobs gap_s apart; ahead_s > 0 schedules each that far in the future."""
    refs = []
    t0 = time.time()
    for i in range(n):
        sleep_until(t0 + i * gap_s)
        now = time.time()
        job = Job(f"{prefix}{i}", now + ahead_s)
        s.adapter.enqueue_one(job, now + ahead_s if ahead_s else None)
        refs.append(job.ref)
    return refs


def delay_record(
    s: Session, test: str, refs: list[str], in_time: bool, concurrency: int | None
) -> dict[str, Any]:
    values = delays_ms(s, refs)
    summary = ms_summary(values)
    dupes = sum(1 for r in refs if len(s.effects.starts.get(r, [])) > 1)
    return record(
        s.adapter,
        test,
        n=len(refs),
        value=summary["p50_ms"],
        unit="ms",
        setting=s.adapter.setting(concurrency),
        ok=in_time and len(values) == len(refs) and dupes == 0,
        concurrency=concurrency,
        values={**summary, "n_seen": len(values)},
        checks={"missing": len(refs) - len(values), "duplicates": dupes},
    )


def measure_latency(
    s: Session, n: int, n_scheduled: int, concurrency: int | None, idle_s: float
) -> list[dict[str, Any]]:
    worker = s.spawn_worker(concurrency, "A")
    warm_ok = warm_up(s)
    time.sleep(idle_s)
    refs = timed_series(s, "p", n, 0.05, 0.0)
    in_time = s.wait_ended(refs, 30.0, worker)
    pickup = delay_record(s, "latency", refs, in_time and warm_ok, concurrency)
    out = [pickup]
    if s.adapter.has_schedule and n_scheduled:
        refs = timed_series(s, "s", n_scheduled, 0.1, 2.0)
        in_time = s.wait_ended(refs, 32.0, worker)
        out.append(delay_record(s, "lateness", refs, in_time, concurrency))
    return out


def measure_rescue(
    s: Session, wait_s: float, job_s: float, kill_after_s: float, concurrency: int | None
) -> dict[str, Any]:
    worker_a = s.spawn_worker(concurrency, "A")
    warm_ok = warm_up(s)
    s.adapter.enqueue_one(Job("long", time.time(), job_s))
    started = s.wait_started("long", 1, 30.0)
    first = s.effects.starts["long"][0] if started else None
    worker_b = s.spawn_worker(concurrency, "B")
    if first is not None:
        sleep_until(first.t + kill_after_s)
    b_alive = worker_b.poll() is None
    t_kill = time.time()
    kill_group(worker_a)
    rerun = started and s.wait_started("long", 2, wait_s)
    second = s.effects.starts["long"][1] if rerun else None
    value = second.t - t_kill if second else None
    outcome = f"re-run after {value:.1f} s" if value is not None else f"not re-run in {wait_s:g} s"
    return record(
        s.adapter,
        "rescue",
        n=1,
        value=value,
        unit="s",
        setting=s.adapter.setting(concurrency),
        ok=bool(rerun),
        concurrency=concurrency,
        outcome=outcome,
        note=s.adapter.rescue_note,
        values={
            "rerun": bool(rerun),
            "waited_s": wait_s,
            "killed_after_s": t_kill - first.t if first else None,
            "starts": len(s.effects.starts.get("long", [])),
            "rerun_by_pid": second.pid if second else None,
            "worker_b_pid": worker_b.pid,
            "worker_b_alive_at_kill": b_alive,
            "queue_state_after": s.adapter.queue_state(),
        },
        checks={"warm_ok": warm_ok, "first_start_seen": started},
    )


# --------------------------------------------------------------------------- CLI


def build_parser(cls: type[Adapter]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=Path(sys.argv[0]).name, description=cls.__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", choices=cls.backends, default=cls.backends[0])
    common.add_argument("--db", default="", help="database name/path (default: per test)")
    common.add_argument("--concurrency", type=int, default=cls.default_concurrency)
    cls.add_arguments(common)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("enqueue", parents=[common])
    p.add_argument("--mode", choices=["single", "bulk", "side_by_side"], required=True)
    p.add_argument("--n", type=int, default=20000)
    p = sub.add_parser("drain", parents=[common])
    p.add_argument("--task", choices=sorted(TASK_SLEEP), default="noop")
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--timeout", type=float, default=300.0)
    p = sub.add_parser("latency", parents=[common])
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--n-scheduled", type=int, default=50)
    p.add_argument("--idle", type=float, default=2.0)
    p = sub.add_parser("rescue", parents=[common])
    p.add_argument("--wait", type=float, default=90.0)
    p.add_argument("--job-seconds", type=float, default=30.0)
    p.add_argument("--kill-after", type=float, default=3.0)
    sub.add_parser("worker", parents=[common])
    return parser


def run_measure(adapter: Adapter, args: argparse.Namespace, s: Session) -> list[dict[str, Any]]:
    conc = args.concurrency
    if args.cmd == "enqueue":
        return [measure_enqueue(adapter, args.mode, args.n)]
    if args.cmd == "drain":
        return [measure_drain(s, args.task, args.n, conc, args.timeout)]
    if args.cmd == "latency":
        return measure_latency(s, args.n, args.n_scheduled, conc, args.idle)
    return [measure_rescue(s, args.wait, args.job_seconds, args.kill_after, conc)]


def drive(adapter: Adapter, args: argparse.Namespace) -> int:
    test = args.cmd
    if test not in adapter.tests:
        print(f"{adapter.lib}: test {test!r} not supported", file=sys.stderr)
        return 2
    adapter.db = args.db or adapter.db_name(test)
    adapter.create_db()
    adapter.open()
    effects = EffectsLog.fresh(WORK_DIR / "effects" / f"{adapter.label(test)}.log")
    try:
        with Workers() as workers:
            for rec in run_measure(adapter, args, Session(adapter, test, effects, workers)):
                emit(rec)
    except NotSupportedError as exc:
        print(f"{adapter.lib}: {exc}", file=sys.stderr)
        return 2
    finally:
        adapter.close()
    return 0


def main(cls: type[Adapter]) -> None:
    args = build_parser(cls).parse_args()
    adapter = cls(args)
    if args.cmd == "worker":
        start_watchdog()
        adapter.run_worker(args.concurrency)
        return
    exit_on_sigterm()
    sys.exit(drive(adapter, args))
