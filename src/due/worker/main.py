"""Run a worker process: logging, signals, and a clean exit code."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading

from due.app import App
from due.logs import JsonFormatter, event
from due.worker.event_loop import loop_factory
from due.worker.recycling import RECYCLE_EXIT_CODE
from due.worker.settings import WorkerSettings
from due.worker.supervisor import SUPERVISOR_ENVIRONMENT_VARIABLE
from due.worker.worker import Worker

log = logging.getLogger("due.worker")


def configure_logging(log_format: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s %(message)s"))
    # The handler's level too: a library's logger with a level of its own
    # (Django sets "django" to INFO) would otherwise print below `level`, at a
    # cost per job for a worker that was asked for warnings only.
    handler.setLevel(level.upper())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


YOUNG_GARBAGE_THRESHOLD = 7000
"""Allocations between two collections of the youngest generation (Python's
default: 700). A worker allocates a few dozen objects a job, nearly all freed
within milliseconds: collected every 700, those of the jobs in flight were
scanned and promoted, then scanned again (7 % of the worker's instructions
per no-op job, under callgrind; with 7,000 and the start-up frozen, none)."""


def run_worker(app: App, settings: WorkerSettings) -> int:
    """Run until SIGTERM/SIGINT (twice: release at once); 0 after a clean shutdown,
    RECYCLE_EXIT_CODE after one the worker asked for itself (recycling.py)."""
    worker = Worker(app, settings)
    worker.exit_within = _exit_within
    _tune_garbage_collection()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, worker.request_stop)
        watchdog = asyncio.create_task(_stop_when_orphaned(worker))
        await worker.run()
        watchdog.cancel()

    with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
        runner.run(main())
    app.close()
    code = RECYCLE_EXIT_CODE if worker.recycler.reason else 0
    if worker.executor.threads_busy:
        # Their jobs were released; a thread cannot be interrupted, so do not wait.
        busy = worker.executor.threads_busy
        event(log, "worker.exit_with_threads_running", logging.WARNING, threads=busy)
        logging.shutdown()
        os._exit(code)
    return code


def _exit_within(seconds: float) -> None:
    """At shutdown a job was handed back while its handler thread still ran: this
    process, and the thread with it, must be gone before that job's lease can
    end and another worker start it. The shutdown's last steps (acknowledgements,
    closing) normally take far less; should they not, the process exits here."""

    def forced() -> None:
        event(log, "worker.exit_forced", logging.WARNING, after=round(seconds, 3))
        logging.shutdown()
        os._exit(0)

    timer = threading.Timer(seconds, forced)
    timer.daemon = True
    timer.start()


def _tune_garbage_collection() -> None:
    """For a process that runs jobs until told to stop (this one): what it has
    loaded so far (modules, the app) is never garbage, so no collection looks
    at it again (gc.freeze), and the youngest generation is collected ten
    times less often (cycles of garbage live a little longer; memory held by
    them is bounded by the threshold)."""
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_GARBAGE_THRESHOLD:
        gc.set_threshold(YOUNG_GARBAGE_THRESHOLD, middle, old)


async def _stop_when_orphaned(worker: Worker) -> None:
    """Under a supervisor: stop when it is gone (its pid is no longer our parent)."""
    supervisor = os.environ.get(SUPERVISOR_ENVIRONMENT_VARIABLE)
    if not supervisor:
        return
    while os.getppid() == int(supervisor):
        await asyncio.sleep(1.0)
    event(log, "worker.orphaned", logging.WARNING, supervisor=supervisor)
    worker.request_stop()
