"""Limits in real worker processes, both backends: concurrency per key and for
the whole limit, a sliding-window rate, a killed and a paused worker, a
limited backlog ahead of other jobs, and a limit raised at run time.

Two witnesses of "how many ran at once": the ledger the handlers write (what
ran in fact; a handler runs inside its job's time as `running`, so it can
only undercount the database's), and the database itself, sampled while the
workers run (the promise is about jobs in state running).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import due
from due.store.postgres.pooler import PoolerSettings
from due.store.sqlite.backend import path_from_url
from tests.apps import limits_app
from tests.helpers.database import rows
from tests.helpers.waiting import TimedOut, wait_until
from tests.helpers.workers import WorkerProcess, Workers, app_with_tasks_of, ledger_records

pytestmark = pytest.mark.slow
LIMITS_APP = "tests.apps.limits_app:app"
WORKERS = 3


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    """The limits app's tasks and limits, on this test's database, real clock."""
    application = app_with_tasks_of(backend_url, limits_app.app)
    for limit in limits_app.app.limits:
        application.limits.declare(limit.name, rate=limit.rate_text, concurrency=limit.concurrency)
    application.sync_limits()
    yield application
    application.close()


def start_workers(workers: Workers, count: int = WORKERS, *options: str) -> list[WorkerProcess]:
    started = [
        workers.start("-c", "4", "--log-level", "debug", *options, app=LIMITS_APP)
        for _ in range(count)
    ]
    for worker in started:
        workers.wait_ready(worker)
    return started


# --- what ran, and when ------------------------------------------------------------


def attempts(workers: Workers) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Each attempt that began, by (job, attempt, pid): its key, start, end (or None)."""
    found: dict[tuple[int, int, int], dict[str, Any]] = {}
    for kind in ("start", "end"):
        for _, job, attempt, pid, at, key in ledger_records(workers.ledger, kind):
            entry = found.setdefault((int(job), int(attempt), int(pid)), {"key": key, "end": None})
            entry[kind] = float(at)
    return found


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (one ending as another starts: not both)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def overlap_by_key(runs: list[dict[str, Any]]) -> dict[str, int]:
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run in runs:
        by_key[run["key"]].append((run["start"], run["end"]))
    return {key: most_at_once(intervals) for key, intervals in by_key.items()}


def jobs_of(url: str, task: str) -> list[tuple[int, str, int, Any]]:
    """(id, state, attempt, result) of every job of a task."""
    found = rows(url, f"SELECT id, state, attempt, result FROM due_jobs WHERE task = '{task}'")
    if url.startswith("sqlite"):  # the result as JSON text
        return [
            (job, state, attempt, result and json.loads(result))
            for job, state, attempt, result in found
        ]
    return found


def limits_state(url: str) -> str:
    """What the jobs and the keys say, for a failure's message."""
    jobs = rows(
        url,
        "SELECT id, state, attempt, attempt_status, limit_wait, limit_wait_key, worker"
        " FROM due_jobs ORDER BY id",
    )
    keys = rows(url, "SELECT name, key, waiting, block_version, opens_at FROM due_limit_keys")
    return "jobs:\n" + "\n".join(map(str, jobs)) + "\nkeys:\n" + "\n".join(map(str, keys))


def all_succeeded(url: str, task: str, count: int) -> bool:
    jobs = jobs_of(url, task)
    return len(jobs) == count and all(state == "succeeded" for _, state, _, _ in jobs)


class RunningWatch:
    """Samples the database's running limited jobs (every 10 ms, in a thread):
    the most running at once seen for each (limit, key)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.most: Counter[tuple[str, str]] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self) -> Any:
        if self.url.startswith("sqlite"):
            return sqlite3.connect(path_from_url(self.url), isolation_level=None)
        settings = PoolerSettings.from_url(self.url)
        return psycopg.connect(settings.url, autocommit=True, **settings.connect_options())  # type: ignore[arg-type]

    def _run(self) -> None:
        query = (
            "SELECT CAST(limits AS text) FROM due_jobs"
            " WHERE state = 'running' AND limits IS NOT NULL"
        )
        connection = self._connect()
        try:
            while not self._stop.is_set():
                now: Counter[tuple[str, str]] = Counter()
                for (text,) in connection.execute(query).fetchall():
                    for name, key in json.loads(text):
                        now[(name, key)] += 1
                for pair, count in now.items():
                    self.most[pair] = max(self.most[pair], count)
                self.samples += 1
                self._stop.wait(0.01)
        finally:
            connection.close()

    def __enter__(self) -> RunningWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def most_of(self, name: str) -> dict[str, int]:
        return {key: count for (limit, key), count in self.most.items() if limit == name}


# --- 1. concurrency, per key and for the whole limit --------------------------------


def test_at_most_one_per_account_and_two_in_all(app: due.App, workers: Workers) -> None:
    start_workers(workers)
    accounts = ["a", "b", "c", "d"]
    sync = app.tasks.get("sync_account")
    requests = [sync.request(account, 0.15) for _ in range(4) for account in accounts]
    with RunningWatch(app.url) as watch:
        app.enqueue_many(requests)
        wait_until(
            lambda: all_succeeded(app.url, "sync_account", len(requests)),
            timeout=40,
            what="every sync to succeed",
        )
    runs = list(attempts(workers).values())
    assert len(runs) == len(requests), "one attempt per job"
    assert all(run["end"] is not None for run in runs)
    per_account = overlap_by_key(runs)
    assert per_account == dict.fromkeys(accounts, 1), per_account
    in_all = most_at_once([(run["start"], run["end"]) for run in runs])
    assert in_all == 2, f"{in_all} ran at once (limit 2: the limit must be reached, not passed)"
    assert watch.samples > 10
    assert max(watch.most_of("account").values()) == 1, watch.most
    assert watch.most_of("pool") == {"": 2}, watch.most
    # Waiting spent no attempt. (Which workers ran them is not checked: the one
    # whose job ended claims again first, so one worker may well run them all;
    # the database's count above held across all three either way.)
    jobs = jobs_of(app.url, "sync_account")
    assert {attempt for _, _, attempt, _ in jobs} == {1}


# --- 2. a sliding-window rate -----------------------------------------------------


def most_in_a_window(instants: list[datetime], period: float) -> int:
    """The most starts in any window [t, t + period) (in microseconds: exact)."""
    micros = sorted(round(instant.timestamp() * 1_000_000) for instant in instants)
    width = round(period * 1_000_000)
    most, first = 0, 0
    for last, at in enumerate(micros):
        while micros[first] <= at - width:
            first += 1
        most = max(most, last - first + 1)
    return most


def started_at(url: str, task: str) -> list[datetime]:
    found = rows(url, f"SELECT started_at FROM due_jobs WHERE task = '{task}'")
    if url.startswith("sqlite"):  # seconds since the epoch, as SQLite stores them
        return [datetime.fromtimestamp(float(value), UTC) for (value,) in found]
    return [value for (value,) in found]


def test_no_window_of_a_second_holds_more_than_the_rate(app: due.App, workers: Workers) -> None:
    start_workers(workers)
    jobs = 70  # 20/s: three and a half windows
    call = app.tasks.get("call_api")
    app.enqueue_many([call.request() for _ in range(jobs)])
    wait_until(
        lambda: all_succeeded(app.url, "call_api", jobs), timeout=30, what="every call to succeed"
    )
    instants = started_at(app.url, "call_api")
    assert most_in_a_window(instants, 1.0) <= 20
    span = (max(instants) - min(instants)).total_seconds()
    assert span >= 3.0, f"70 starts at 20/s took {span:.2f}s"
    assert {attempt for _, _, attempt, _ in jobs_of(app.url, "call_api")} == {1}
    # The log of starts in the database agrees: every start counted, once; a
    # start whose handler could not begin in time (a loaded machine) was
    # handed back, counted, and started again.
    handed_back = sum(
        1
        for job in app.jobs(task="call_api", limit=jobs)
        for entry in job.errors
        if entry.kind == "released" and "handed back unstarted" in entry.error
    )
    counted = rows(app.url, "SELECT started_total FROM due_limit_keys WHERE name = 'api'")
    assert counted == [(jobs + handed_back,)]


# --- 3. a killed worker and a paused one ---------------------------------------------


def test_a_killed_and_a_paused_worker_lose_no_job_nor_pass_the_limit(
    app: due.App, workers: Workers
) -> None:
    """The promise under faults: at most one job of a key *running* in the
    database at any moment. A paused worker's job stays running until its
    lease (2 s) expires and it is rescued; then its slot frees and another job
    of the key may start, while the paused handler, frozen, has not ended (it
    will end when resumed, and its result is discarded). So what is checked in
    the ledger is the attempts that ran holding their lease to the end: the
    attempt each job succeeded with. The database's own count is checked
    throughout, paused and killed workers included."""
    started = start_workers(workers, WORKERS, "--lease", "2s")
    accounts = ["a", "b", "c"]
    sync = app.tasks.get("fragile_sync")
    # Long enough that a job seen running is still running when its worker is
    # killed or paused, however loaded the machine.
    requests = [sync.request(account, 1.0) for _ in range(5) for account in accounts]
    with RunningWatch(app.url) as watch:
        app.enqueue_many(requests)

        def running_in(worker: WorkerProcess) -> bool:
            """Whether the worker runs a job whose start it has said (the attempt
            counts: a start not said yet is given back uncounted, as if never run)."""
            begun = [
                key[0]
                for key, run in attempts(workers).items()
                if key[2] == worker.pid and run["end"] is None
            ]
            said = (
                "SELECT 1 FROM due_jobs WHERE state = 'running' AND attempt_status = 'started'"
                f" AND id IN ({', '.join(map(str, begun))})"
            )
            return bool(begun) and bool(rows(app.url, said))

        # Whichever worker runs a job is killed, then whichever other one runs
        # a job is paused: the worker whose job ended claims again first, so
        # one worker may well run every job for a while.
        busy: list[WorkerProcess] = []

        def one_busy(among: list[WorkerProcess]) -> bool:
            busy[:] = [worker for worker in among if running_in(worker)]
            return bool(busy)

        wait_until(lambda: one_busy(started), timeout=20, what="a worker to run a job")
        doomed = busy[0]
        doomed.signal(signal.SIGKILL)
        others = [worker for worker in started if worker is not doomed]
        wait_until(lambda: one_busy(others), timeout=20, what="another worker to run a job")
        paused = busy[0]
        workers.pause(paused)
        # Past its lease and a rescue: jobs of its key run again elsewhere meanwhile.
        frozen = {
            key[0]
            for key, run in attempts(workers).items()
            if key[2] == paused.pid and run["end"] is None
        }
        wait_until(
            lambda: all(
                rows(app.url, f"SELECT 1 FROM due_jobs WHERE id = {job} AND state != 'running'")
                for job in frozen
            ),
            timeout=20,
            what="the paused worker's jobs to be rescued",
        )
        paused.signal(signal.SIGCONT)
        # A worker paused in the middle of a claim holds its keys' locks until
        # it resumes or the server ends its idle transaction (10 s): the other
        # claims of those keys wait meanwhile. Hence the margin; what is
        # checked is that every job ends, none lost, none twice.
        try:
            wait_until(
                lambda: all_succeeded(app.url, "fragile_sync", len(requests)),
                timeout=90,
                what="every job to succeed",
            )
        except TimedOut as timed_out:
            raise AssertionError(f"{timed_out}\n{limits_state(app.url)}") from None
    jobs = {job: (attempt, result) for job, _, attempt, result in jobs_of(app.url, "fragile_sync")}
    ran = attempts(workers)
    kept = [
        run
        for (job, attempt, pid), run in ran.items()
        if jobs[job] == (attempt, pid)  # the attempt that succeeded, in the process that ran it
    ]
    assert len(kept) == len(requests)
    assert max(overlap_by_key(kept).values()) == 1, overlap_by_key(kept)
    assert max(watch.most_of("fragile").values()) == 1, watch.most
    # An attempt is spent only by a start that ran (never by waiting for a slot).
    starts = Counter(job for job, _, _ in ran)
    assert all(attempt <= starts[job] for job, (attempt, _) in jobs.items()), (jobs, starts)
    assert sum(attempt for attempt, _ in jobs.values()) > len(requests), "nothing was rescued"


# --- 4. a limited backlog ahead of other jobs --------------------------------------------


def test_a_waiting_backlog_does_not_hold_up_other_jobs(app: due.App, workers: Workers) -> None:
    export = app.tasks.get("serial_export")
    app.enqueue_many([export.request(0.05) for _ in range(600)])  # priority 10, one at a time
    start_workers(workers)
    wait_until(
        lambda: rows(
            app.url, "SELECT 1 FROM due_jobs WHERE task = 'serial_export' AND state = 'succeeded'"
        ),
        timeout=20,
        what="the backlog to start",
    )
    quick = app.tasks.get("quick")
    with RunningWatch(app.url) as watch:
        app.enqueue_many([quick.request() for _ in range(100)])  # the same queue, priority 0
        wait_until(
            lambda: all_succeeded(app.url, "quick", 100), timeout=10, what="the quick jobs to run"
        )
    waiting = rows(
        app.url, "SELECT count(*) FROM due_jobs WHERE task = 'serial_export' AND state = 'queued'"
    )[0][0]
    assert waiting >= 400, f"{waiting} of the backlog still waiting"
    assert watch.most_of("serial") == {"": 1}, watch.most


# --- 5. a limit raised at run time ---------------------------------------------------------


def test_a_limit_raised_at_run_time_lets_more_run_within_seconds(
    app: due.App, workers: Workers
) -> None:
    start_workers(workers)
    work = app.tasks.get("elastic_work")
    app.enqueue_many([work.request(0.3) for _ in range(60)])
    with RunningWatch(app.url) as watch:
        wait_until(
            lambda: (
                len(
                    rows(
                        app.url,
                        "SELECT 1 FROM due_jobs WHERE task = 'elastic_work' "
                        "AND state = 'succeeded'",
                    )
                )
                >= 3
            ),
            timeout=20,
            what="a few jobs to run one at a time",
        )
        assert watch.most_of("elastic") == {"": 1}
        app.set_limit("elastic", concurrency=4)
        wait_until(
            lambda: watch.most_of("elastic").get("", 0) >= 4,
            timeout=5,
            what="four to run at once",
        )
    assert watch.most_of("elastic") == {"": 4}
    app.reset_limit("elastic")


# --- 6. a schedule stored before its task had limits --------------------------------------


def test_a_schedules_runs_count_against_the_limits_its_task_has_now(
    app: due.App, workers: Workers
) -> None:
    """A schedule added while its task had no limits stores runs that count
    against none. A release gives the task `limits=["exports"]`
    (concurrency 1): its runs count against it as the workers' code says, one
    at a time (before: every run ran unlimited, 4 at once)."""
    before = due.App(app.url)  # the code of the schedule's day: the task had no limits
    before.task(name="scheduled_export")(limits_app.scheduled_export.fn)
    before.add_schedule("exports", every="1s", task="scheduled_export", args=[1.5], overlap="allow")
    before.close()
    start_workers(workers)
    succeeded = "SELECT 1 FROM due_jobs WHERE task = 'scheduled_export' AND state = 'succeeded'"
    wait_until(lambda: len(rows(app.url, succeeded)) >= 4, timeout=60, what="four runs to succeed")
    runs = [run for run in attempts(workers).values() if run["end"] is not None]
    assert most_at_once([(run["start"], run["end"]) for run in runs]) == 1
    stored = rows(
        app.url, "SELECT DISTINCT CAST(limits AS text) FROM due_jobs WHERE state = 'succeeded'"
    )
    assert [json.loads(text) for (text,) in stored] == [[["exports", ""]]]
    attempts_spent = rows(app.url, "SELECT attempt FROM due_jobs WHERE state = 'succeeded'")
    assert {attempt for (attempt,) in attempts_spent} == {1}  # handed back: none spent


# --- 7. a limit taken out of the code -------------------------------------------------------


def test_jobs_whose_limit_was_taken_out_of_the_code_run(app: due.App, workers: Workers) -> None:
    """Jobs enqueued while `call_api` counted against "api"; a release takes
    the limit out, and its workers declare none (so never claim a job that
    counts against one): the jobs stayed queued for ever. The workers' sweep
    drops the limit from them, and they run, once each."""
    call = app.tasks.get("call_api")
    jobs = [job.id for job in app.enqueue_many([call.request() for _ in range(5)])]
    worker = workers.start("-c", "4", app="tests.apps.limits_removed_app:app")
    workers.wait_ready(worker)
    wait_until(
        lambda: all_succeeded(app.url, "call_api", len(jobs)),
        timeout=30,
        what="the jobs of the limit taken out to run",
    )
    assert {attempt for _, _, attempt, _ in jobs_of(app.url, "call_api")} == {1}
    assert "job.limits_dropped" in worker.log()
