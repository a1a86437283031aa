"""`--max-jobs-per-process` and `--max-memory-per-process`: a worker process
that has run its share of jobs, or grown past its memory, leaves cleanly.

Handlers that leak (a third-party library's cache, a C extension) grow a
long-lived process until the kernel kills it, mid-job. Instead, past either
limit the worker recycles itself: it stops claiming, lets its running jobs
finish within the grace, hands back the rest (their attempts not counted:
no job lost, none run twice), writes every outcome, and exits with
RECYCLE_EXIT_CODE. Under `--processes` the supervisor starts a fresh
process in its place at once (supervisor.py); a lone `due worker` leaves the
restart to its process manager.

The jobs are counted as they start: the one that reaches the limit stops
the claims and the starts at once (jobs claimed ahead are released, never
started), so a process never starts more than its count; memory (the
process's resident set) every MEMORY_CHECK_SECONDS, and only once the
process has run a job: one that starts past its limit would otherwise be
replaced by another as big, again and again.
"""

from __future__ import annotations

import logging
import re
import resource
import sys
from collections.abc import Callable

from due.errors import ConfigurationError
from due.logs import event

log = logging.getLogger("due.worker")
RECYCLE_EXIT_CODE = 75
"""A worker that recycled itself exits with this (EX_TEMPFAIL: "try again"),
so a process manager that restarts on failure starts it again."""
MEMORY_CHECK_SECONDS = 1.0
MB = 1_000_000
SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": MB,
    "mb": MB,
    "g": 1000 * MB,
    "gb": 1000 * MB,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str | int, what: str) -> int:
    """`500MB` (10^6), `512MiB` (2^20), `2G`, or a number of bytes → bytes."""
    if isinstance(text, int):
        size = text
    else:
        match = _SIZE.fullmatch(text)
        unit = match[2].lower() if match else ""
        if match is None or unit not in SIZE_UNITS:
            raise ConfigurationError(
                f"{what} {text!r} is not a size: give a number with a unit, "
                "e.g. 500MB, 512MiB or 2GB"
            )
        size = int(float(match[1]) * SIZE_UNITS[unit])
    if size < MB:
        raise ConfigurationError(f"{what} must be at least 1MB, got {text!r}")
    return size


def resident_bytes() -> int:
    """This process's resident memory now (Linux), or at its peak elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


class Recycler:
    """Watches the limits; calls `recycle(reason)` once, when one is passed."""

    def __init__(
        self,
        *,
        max_jobs: int | None,
        max_memory: int | None,
        recycle: Callable[[str], None],
        memory: Callable[[], int] = resident_bytes,
    ) -> None:
        self._max_jobs = max_jobs
        self._max_memory = max_memory
        self._recycle = recycle
        self._memory = memory
        self.reason: str | None = None
        self.started = 0
        """Jobs this process has started."""
        self._said_too_small = False

    def interval(self) -> float:
        return MEMORY_CHECK_SECONDS

    async def run_once(self) -> str | None:
        """Check the memory; returns why the process recycles, if it does."""
        if self.reason is None and self._max_memory is not None:
            rss = self._memory()
            if rss > self._max_memory and self.started > 0:
                self._begin("memory", rss=rss)
            elif rss > self._max_memory and not self._said_too_small:
                # Before any job: a replacement would start as big. Said once.
                self._said_too_small = True
                event(
                    log,
                    "worker.memory_limit_below_start",
                    logging.WARNING,
                    rss_mb=round(rss / MB, 1),
                    max_memory_mb=round(self._max_memory / MB, 1),
                    note="no recycling before this process has run a job",
                )
        return self.reason

    def job_started(self) -> None:
        """Each job's start (the worker's launch)."""
        self.started += 1
        limit = self._max_jobs
        if self.reason is None and limit is not None and self.started >= limit:
            self._begin("jobs", rss=self._memory())

    def _begin(self, reason: str, rss: int) -> None:
        self.reason = reason
        event(
            log,
            "worker.recycling",
            logging.WARNING if reason == "memory" else logging.INFO,
            reason=reason,
            jobs=self.started,
            max_jobs=self._max_jobs,
            rss_mb=round(rss / MB, 1),
            max_memory_mb=None if self._max_memory is None else round(self._max_memory / MB, 1),
        )
        self._recycle(reason)
