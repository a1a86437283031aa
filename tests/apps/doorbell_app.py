"""A SQLite worker that looks for other processes' commits only every few
seconds and claims on its own only every minute: what wakes it sooner is the
doorbell (tests/process/test_sqlite_doorbell.py).

    python -m tests.apps.doorbell_app <sqlite url> <commit_poll seconds> <ledger>

Each job appends `start <job id> <pid> <time>` to the ledger.
"""

from __future__ import annotations

import os
import sys
import time

import due
from due.worker.main import configure_logging, run_worker
from due.worker.settings import WorkerSettings

LONG_POLL_SECONDS = 60.0


def build(url: str, commit_poll: float, ledger: str) -> due.App:
    app = due.App(url, store_options={"commit_poll": commit_poll})

    @app.task(name="stamp")
    def stamp(ctx: due.Context) -> None:
        line = f"start {ctx.job_id} {os.getpid()} {time.time():.6f}\n"
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    return app


def main() -> None:
    url, commit_poll, ledger = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    configure_logging("text", os.environ.get("DUE_TEST_LOG_LEVEL", "info"))
    settings = WorkerSettings.build(
        {"default": 4}, scheduler=False, poll_interval=LONG_POLL_SECONDS
    )
    sys.exit(run_worker(build(url, commit_poll, ledger), settings))


if __name__ == "__main__":
    main()
