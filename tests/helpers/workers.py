"""Real worker processes for tests: started with the CLI, killed with real signals."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import due
from due.store.sqlite.writer_turns import SUFFIX as TURNS_SUFFIX
from tests.helpers.waiting import wait_until

REPOSITORY = Path(__file__).resolve().parents[2]
LEDGER_APP = "tests.apps.ledger_app:app"


@dataclass
class LedgerLine:
    kind: str
    job: int
    attempt: int
    pid: int
    at: float


def read_ledger(path: Path) -> list[LedgerLine]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        kind, job, attempt, pid, at = raw.split()[:5]
        if kind not in ("start", "end"):
            continue
        lines.append(LedgerLine(kind, int(job), int(attempt), int(pid), float(at)))
    return lines


def ledger_records(path: Path, kind: str) -> list[list[str]]:
    """Every ledger line of one kind, split in fields (kind, job, attempt, pid, at, ...)."""
    if not path.exists():
        return []
    lines = (raw.split() for raw in path.read_text().splitlines())
    return [fields for fields in lines if fields and fields[0] == kind]


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    started: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.process.wait(timeout=timeout)


class Workers:
    """Starts worker processes for one test and kills whatever is left at the end."""

    def __init__(self, url: str, ledger: Path, logs: Path) -> None:
        self.url = url
        self.ledger = ledger
        self.logs = logs
        self.started: list[WorkerProcess] = []

    def start(
        self, *options: str, app: str = LEDGER_APP, env: dict[str, str] | None = None
    ) -> WorkerProcess:
        log_path = self.logs / f"worker-{len(self.started)}.log"
        environment = {
            **os.environ,
            "DUE_DATABASE_URL": self.url,
            "DUE_TEST_LEDGER": str(self.ledger),
            # (the caller's path after it: a worktree's own src/ before the installed due)
            "PYTHONPATH": os.pathsep.join(
                [str(REPOSITORY), str(REPOSITORY / "src"), os.environ.get("PYTHONPATH", "")]
            ),
            **(env or {}),
        }
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "due", "--app", app, "worker", *options],
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPOSITORY,
                start_new_session=True,
            )
        worker = WorkerProcess(process, log_path)
        self.started.append(worker)
        return worker

    def wait_ready(self, worker: WorkerProcess, timeout: float = 30.0) -> None:
        wait_until(
            lambda: "worker.started" in worker.log() or worker.process.poll() is not None,
            timeout,
            what="the worker to start",
        )
        assert worker.process.poll() is None, worker.log()

    def pause(self, worker: WorkerProcess, attempts: int = 100) -> None:
        """SIGSTOP `worker` at a moment it holds no SQLite write lock, nor its
        turn at it (store/sqlite/writer_turns.py).

        A process frozen inside a write transaction blocks every writer of a
        SQLite file until it resumes (SQLite has one writer); one frozen with
        its turn (taken just before the transaction, given back just after)
        makes every other process's next write wait a second for it, and
        logs a warning. Tests of a paused *lease* must not pause the database
        with it.
        """
        worker.signal(signal.SIGSTOP)
        if not self.url.startswith("sqlite"):
            return
        path = self.url.split(":///", 1)[1]
        for _ in range(attempts):
            connection = sqlite3.connect(path, timeout=0.2, isolation_level=None)
            try:
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("ROLLBACK")
                if not holds_a_lock_on(worker.pid, path + TURNS_SUFFIX):
                    return
            except sqlite3.OperationalError:
                pass
            finally:
                connection.close()
            worker.signal(signal.SIGCONT)
            time.sleep(0.02)
            worker.signal(signal.SIGSTOP)
        raise AssertionError(f"worker {worker.pid} was writing to SQLite at every pause")

    def ledger_lines(self) -> list[LedgerLine]:
        return read_ledger(self.ledger)

    def records(self, kind: str) -> list[list[str]]:
        return ledger_records(self.ledger, kind)

    def stop_all(self) -> None:
        for worker in self.started:
            if worker.process.poll() is None:
                for signum in (signal.SIGCONT, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(worker.process.pid, signum)
                worker.process.wait(timeout=10)


def holds_a_lock_on(pid: int, path: str) -> bool:
    """Whether process `pid` holds an fcntl lock on the file at `path`, as Linux
    lists them in /proc/locks (read, not tried: this process takes and drops
    no lock of its own on the file, which would drop any it holds). Elsewhere,
    or for a file not there: False."""
    try:
        found = os.stat(path)
        listed = Path("/proc/locks").read_text()
    except OSError:
        return False
    file = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    for line in listed.splitlines():
        fields = line.split()  # "1: POSIX ADVISORY WRITE <pid> <dev:inode> 0 EOF"
        if len(fields) > 5 and fields[1] != "->" and fields[4:6] == [str(pid), file]:
            return True  # ("->": a process waiting for the lock, not holding it)
    return False


def app_with_tasks_of(url: str, source: due.App) -> due.App:
    """A migrated app on `url` that knows `source`'s tasks (the tests' own app on
    the test's database, as the worker processes see it)."""
    application = due.App(url)
    application.migrate()
    for task in source.tasks:
        application.tasks.add(due.Task(application, task.fn, task.name, task.config))
    return application


def job_state(app: due.App, job_id: int) -> due.Job:
    return app.get(job_id)


def wait_start_said(url: str, job_id: int) -> None:
    """Until the worker running `job_id` has told the store its handler began
    (within a quarter second of the start): from then on the attempt counts,
    whatever becomes of that worker."""
    from tests.helpers.database import rows

    said = f"SELECT 1 FROM due_jobs WHERE id = {int(job_id)} AND attempt_status = 'started'"
    wait_until(lambda: rows(url, said), what="the start to be said")
