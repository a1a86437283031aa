"""Store operations the worker relies on, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

import due
from due import JobState
from due.clock import FakeClock
from due.core.records import (
    ClaimRequest,
    Completion,
    Retention,
    UnknownTaskSweep,
    WorkerRegistration,
)
from due.maintenance.unknown_tasks import UnknownTaskReaper
from due.store.postgres.backend import LANE_SETTINGS
from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from due.store.work import _fail_unknown
from due.visibility.metrics import registry_for
from tests.conftest import START
from tests.helpers.reads import generic_plan, reads


@pytest.fixture
def work(app: due.App) -> due.Task:
    @app.task(name="work")
    def work(n: int = 0) -> None: ...

    return work


def test_release_hands_a_job_back_without_counting_the_attempt(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    job = work.enqueue()
    (claimed,) = app.store.job_claim(ClaimRequest("default", 1, "leaving", 10))
    clock.advance("3s")
    assert app.store.job_release([claimed_lease(claimed)], "worker leaving") == {job.id}
    released = app.get(job.id)
    assert released.state == JobState.QUEUED and released.attempt == 0
    assert released.run_at == job.run_at == START  # its place in line
    assert released.errors[-1].kind == "released" and released.errors[-1].error == "worker leaving"
    assert released.last_error is None  # a release is not an error
    (again,) = app.store.job_claim(ClaimRequest("default", 1, "staying", 10))
    assert again.attempt == 1 and again.lease_token > claimed.lease_token


def test_release_is_fenced(app: due.App, work: due.Task, clock: FakeClock) -> None:
    work.enqueue()
    (stale,) = app.store.job_claim(ClaimRequest("default", 1, "a", 10))
    clock.advance("11s")
    app.store.job_rescue()
    app.store.job_claim(ClaimRequest("default", 1, "b", 10))
    assert app.store.job_release([claimed_lease(stale)], "late") == set()
    assert app.get(stale.id).worker == "b"


def test_next_due_sees_only_tasks_this_worker_knows(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    assert app.store.job_next_due("default", ["work"]) is None
    work.options(delay="5m").enqueue()
    work.options(delay="1m", queue="other").enqueue()

    @app.task(name="unknown_elsewhere")
    def unknown_elsewhere() -> None: ...

    unknown_elsewhere.options(delay="10s").enqueue()
    assert app.store.job_next_due("default", ["work"]) == START + timedelta(minutes=5)
    assert app.store.job_next_due("default", ["work", "unknown_elsewhere"]) == START + timedelta(
        seconds=10
    )
    assert app.store.job_next_due("other", ["work"]) == START + timedelta(minutes=1)


def test_unknown_tasks_fail_only_after_the_grace(app: due.App, clock: FakeClock) -> None:
    @app.task(name="from_the_future", queue="emails")
    def from_the_future() -> None: ...

    @app.task(name="known", queue="emails")
    def known() -> None: ...

    future_job, known_job = from_the_future.enqueue(), known.enqueue()
    clock.advance("59m")
    assert (
        app.store.job_fail_unknown_tasks(UnknownTaskSweep(["emails"], ["known"], 3600)).failed == []
    )
    clock.advance("2m")
    assert (
        app.store.job_fail_unknown_tasks(UnknownTaskSweep(["other"], ["known"], 3600)).failed == []
    )
    assert app.store.job_fail_unknown_tasks(
        UnknownTaskSweep(["emails"], ["known"], 3600)
    ).failed == [future_job.id]
    failed = app.get(future_job.id)
    assert failed.state == JobState.FAILED and failed.attempt == 0
    assert failed.last_error == (
        "unknown task from_the_future: no live worker of queue emails knew it within 1h of its "
        "due time"
    )
    assert failed.errors[-1].kind == "unknown_task"
    assert app.get(known_job.id).state == JobState.QUEUED
    assert app.retry(future_job.id).state == JobState.QUEUED  # after the deploy


def test_a_sweep_looks_at_a_bounded_number_of_old_jobs_and_the_next_reads_on(
    app: due.App, clock: FakeClock
) -> None:
    """A sweep read every job due past the grace: a second per million on SQLite,
    holding the write lock all along, every minute in every worker."""

    @app.task(name="known")
    def known(n: int) -> None: ...

    @app.task(name="gone")
    def gone() -> None: ...

    oldest = known.enqueue(0)
    clock.advance("1s")
    second = known.enqueue(1)
    clock.advance("1s")
    lost = gone.enqueue()
    clock.advance("1s")
    known.enqueue(2)
    clock.advance("2h")
    sweep = UnknownTaskSweep(["default"], ["known"], 3600, scan=2)

    first = app.store.job_fail_unknown_tasks(sweep)
    assert first.failed == []  # it looked at the two oldest only
    assert list(first.after) == ["default"] and first.after["default"].id == second.id
    assert app.get(lost.id).state == JobState.QUEUED

    next_one = app.store.job_fail_unknown_tasks(replace(sweep, after=first.after))
    assert next_one.failed == [lost.id]
    assert next_one.after["default"].id != second.id

    last = app.store.job_fail_unknown_tasks(replace(sweep, after=next_one.after))
    assert last.failed == [] and last.after == {}  # read to the end: start over

    # The next pass starts from the oldest job again, and finds what is older.
    older = gone.options(run_at=START - timedelta(hours=1)).enqueue()
    again = app.store.job_fail_unknown_tasks(replace(sweep, after=last.after))
    assert again.failed == [older.id]
    assert again.after["default"].id == oldest.id


def test_a_sweep_reads_as_much_inside_a_crowd_of_jobs_due_at_one_instant(
    app: due.App, clock: FakeClock
) -> None:
    """Jobs enqueued together share a run_at. With only run_at ordered in the
    index, a look that starts inside such a group read and sorted all of it."""

    @app.task(name="known")
    def known(n: int) -> None: ...

    for size in (100, 2000):
        app.enqueue_many([known.options(queue=f"q{size}").request(n) for n in range(size)])
    clock.advance("2h")

    def reads_of_the_second_look(queue: str) -> int:
        sweep = UnknownTaskSweep([queue], ["known"], 3600, scan=10)
        mark = app.store.job_fail_unknown_tasks(sweep).after[queue]
        params: dict[str, Any] = {"queue": queue, "tasks": ["known"], "grace": 3600.0}
        params |= {"scan": 10, "after_priority": mark.priority}
        params |= {"after_run_at": mark.run_at, "after_id": mark.id}
        params["now"] = clock.now()
        if app.url.startswith("sqlite"):
            params |= {"tasks": '["known"]', "now": clock.now().timestamp()}
        return reads(app, "unknown_task_candidates", params)

    few = reads_of_the_second_look("q100")
    assert reads_of_the_second_look("q2000") < few * 1.5, few


def test_a_candidate_that_changed_after_the_look_is_not_failed(
    app: due.App, clock: FakeClock
) -> None:
    """The look and the write are two transactions: in between, a candidate may
    be claimed, held, or its task known by a worker that starts. The write
    checks again (here called with the look's ids, as the sweep does)."""

    @app.task(name="gone")
    def gone(n: int) -> None: ...

    claimed, unchanged = gone.enqueue(1), gone.enqueue(2)
    parent = app.batch(gone, [(3,)])
    (piece,) = app.jobs(parent=parent.id)
    later = gone.enqueue(4)
    clock.advance("2h")
    sweep = UnknownTaskSweep(["default"], ["known"], 3600)
    ids = [claimed.id, unchanged.id, piece.id, later.id]

    app.store.job_claim(ClaimRequest("default", 1, "w", 30.0))  # the oldest: `claimed`
    app.pause_group(parent.id)
    assert _fail_unknown(app.store.backend, sweep, ids[:3]) == [unchanged.id]

    app.store.worker_register(WorkerRegistration("new:1:aa", "new", 1, {"default": 4}, ["gone"]))
    assert _fail_unknown(app.store.backend, sweep, [later.id]) == []
    assert app.get(later.id).state == JobState.QUEUED


def test_the_reaper_reads_on_from_where_its_last_sweep_stopped(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="known")
    def known(n: int) -> None: ...

    @app.task(name="gone")
    def gone() -> None: ...

    for n in range(3):
        known.enqueue(n)
        clock.advance("1s")
    lost = gone.enqueue()
    clock.advance("2h")

    async def calls(fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    reaper = UnknownTaskReaper(
        store=app.store, call=calls, sweep=UnknownTaskSweep(["default"], ["known"], 3600, scan=1)
    )
    found = [asyncio.run(reaper.run_once()) for _ in range(4)]
    assert found == [[], [], [], [lost.id]]


def test_a_job_another_live_worker_knows_is_left_for_it(app: due.App, clock: FakeClock) -> None:
    """The reaper compared a job's task with the calling worker's own registry only,
    and failed jobs that another live worker of the queue knew."""

    @app.task(name="new_task", queue="emails")
    def new_task() -> None: ...

    job = new_task.enqueue()
    app.store.worker_register(
        WorkerRegistration("new:1:aa", "new", 1, {"emails": 4}, ["new_task", "known"])
    )
    app.store.worker_register(WorkerRegistration("old:2:bb", "old", 2, {"emails": 4}, ["known"]))
    app.store.worker_register(WorkerRegistration("bulk:3:cc", "bulk", 3, {"bulk": 4}, ["new_task"]))
    clock.advance("2h")
    app.store.worker_touch("new:1:aa")
    app.store.worker_touch("old:2:bb")
    assert (
        app.store.job_fail_unknown_tasks(UnknownTaskSweep(["emails"], ["known"], 3600, 30)).failed
        == []
    )
    assert {w.id: w.tasks for w in app.store.worker_list()}["new:1:aa"] == ("known", "new_task")
    clock.advance("31s")  # the worker that knows it went silent
    app.store.worker_touch("old:2:bb")
    assert app.store.job_fail_unknown_tasks(
        UnknownTaskSweep(["emails"], ["known"], 3600, 30)
    ).failed == [job.id]


def test_workers_register_report_in_and_go(app: due.App, clock: FakeClock) -> None:
    app.store.worker_register(WorkerRegistration("host:1:aa", "host", 1, {"emails": 4}))
    app.store.worker_register(WorkerRegistration("host:2:bb", "host", 2, {"bulk": 2}))
    clock.advance("20s")
    app.store.worker_touch("host:1:aa")
    clock.advance("20s")
    assert app.store.worker_mark_gone(30) == ["host:2:bb"]
    listed = {w.id: w for w in app.store.worker_list()}
    assert listed["host:1:aa"].state == "running" and listed["host:1:aa"].queues == {"emails": 4}
    assert listed["host:2:bb"].state == "gone"
    assert listed["host:1:aa"].last_seen_at == START + timedelta(seconds=20)
    app.store.worker_touch("host:2:bb")  # it was only paused
    app.store.worker_set_state("host:1:aa", "stopped")
    listed = {w.id: w for w in app.store.worker_list()}
    assert listed["host:2:bb"].state == "running"
    assert listed["host:1:aa"].state == "stopped"
    assert listed["host:1:aa"].stopped_at == START + timedelta(seconds=40)


def test_workers_unseen_for_longer_than_the_retention_are_pruned(
    app: due.App, clock: FakeClock
) -> None:
    """Every process that ever started registered itself: without pruning, each
    deploy would add rows for ever (listed, and read by the unknown-task reaper)."""
    app.store.worker_register(WorkerRegistration("old:1:aa", "old", 1, {"emails": 4}))
    app.store.worker_set_state("old:1:aa", "stopped")
    clock.advance("25d")
    app.store.worker_register(WorkerRegistration("recent:2:bb", "recent", 2, {"emails": 4}))
    app.store.worker_set_state("recent:2:bb", "stopped")
    app.store.worker_register(WorkerRegistration("live:3:cc", "live", 3, {"emails": 4}))
    app.store.worker_register(WorkerRegistration("paused:4:dd", "paused", 4, {"emails": 4}))
    clock.advance("6d")
    assert app.store.worker_touch("live:3:cc")  # reports in: seen now
    app.store.job_prune(Retention(7 * 86400, 30 * 86400))  # the longer one counts: 30 days
    listed = ["live:3:cc", "paused:4:dd", "recent:2:bb"]
    assert sorted(w.id for w in app.store.worker_list()) == listed  # never one running
    assert app.store.worker_mark_gone(30) == ["paused:4:dd"]  # silent for 6 days
    clock.advance("31d")
    app.store.job_prune(Retention(7 * 86400, 30 * 86400))
    assert [w.id for w in app.store.worker_list()] == ["live:3:cc"]  # not marked gone
    assert not app.store.worker_touch("paused:4:dd")  # it wakes up: not registered any more


def test_a_recycling_is_counted_with_its_stop_and_outlives_the_pruned_rows(
    app: due.App, clock: FakeClock
) -> None:
    """The counter Prometheus reads (due_worker_recycles_total): kept apart from
    the registry, whose rows are pruned, so it never goes down."""
    for n, reason in enumerate(["memory", "jobs", "memory", None]):
        worker = f"host:{n}:aa"
        app.store.worker_register(WorkerRegistration(worker, "host", n, {"emails": 4}))
        app.store.worker_set_state(worker, "stopping")
        app.store.worker_set_state(worker, "stopped", recycled=reason)
    assert app.store.worker_recycles() == {"jobs": 1, "memory": 2}
    clock.advance("31d")
    app.store.job_prune(Retention(7 * 86400, 30 * 86400))
    assert app.store.worker_list() == []
    assert app.store.worker_recycles() == {"jobs": 1, "memory": 2}
    metrics = generate_latest(registry_for(app)).decode()
    assert 'due_worker_recycles_total{reason="memory"} 2.0' in metrics
    assert 'due_worker_recycles_total{reason="jobs"} 1.0' in metrics


def claimed_lease(claimed):  # type: ignore[no-untyped-def]
    from due.core.records import Lease

    return Lease(claimed.id, claimed.lease_token, 10)


def test_next_due_is_the_earliest_across_every_priority(
    app: due.App, work: due.Task, clock: FakeClock
) -> None:
    @app.task(name="other")
    def other() -> None: ...

    work.options(delay="30m", priority=10).enqueue()
    work.options(delay="20m", priority=-5).enqueue()
    work.options(delay="40m", priority=0).enqueue()
    other.options(delay="1m", priority=3).enqueue()  # earlier, but not a task this worker knows
    assert app.store.job_next_due("default", ["work"]) == START + timedelta(minutes=20)
    assert app.store.job_next_due("default", ["other"]) == START + timedelta(minutes=1)


def test_the_loop_lane_claims_and_acknowledges_as_the_thread_path_does(
    app: due.App, work: due.Task, backend: str, clock: FakeClock
) -> None:
    """PostgreSQL's claims and acknowledgements from an event loop: the same
    leases (on the store's clock), the same fenced write, the same counts; a
    batch that settles a parent is left to the thread path. SQLite has none."""
    lane = app.store.loop_lane(2)
    if backend == "sqlite":
        assert lane is None
        return
    assert lane is not None
    jobs = [work.enqueue(n) for n in range(3)]

    async def scenario() -> None:
        await lane.open()
        try:
            request = ClaimRequest("default", 2, "looping", 10)
            claimed = await app.store.job_claim_on_loop(lane, request)
            assert [job.id for job in claimed] == [jobs[0].id, jobs[1].id]
            assert claimed[0].lease_expires_at == START + timedelta(seconds=10)
            first, second = claimed
            done = Completion(first.id, first.lease_token, JobState.SUCCEEDED, result="null")
            stale = Completion(second.id, second.lease_token + 1, JobState.SUCCEEDED)
            assert await app.store.job_complete_on_loop(lane, [done, stale]) == {first.id}
            # Written again (its first reply lost): recorded, and counted once.
            assert await app.store.job_complete_on_loop(lane, [done, stale]) == {first.id}
            settling = Completion(second.id, second.lease_token, JobState.FAILED, settles=True)
            assert await app.store.job_complete_on_loop(lane, [settling]) is None
        finally:
            await lane.close()

    asyncio.run(scenario())
    assert app.get(jobs[0].id).state == JobState.SUCCEEDED
    assert app.get(jobs[1].id).state == JobState.RUNNING  # the stale write changed nothing
    assert app.get(jobs[2].id).state == JobState.QUEUED
    (figures,) = [f for f in app.store.stats_figures() if f.task == "work"]
    assert figures.window("total").counts["succeeded"] == 1  # counted once, by the statement


@pytest.mark.parametrize("backend", ["postgres"])
def test_the_loop_lane_plans_its_statements_once_per_session(app: due.App, work: due.Task) -> None:
    """Planned at each claim, a claim of 100 jobs spent 0.6 ms of the server's
    time in planning. psycopg prepares a statement run five times; the lane's
    sessions then keep one plan (a queue big enough that PostgreSQL, left to
    choose, plans each claim anew)."""
    app.enqueue_many([work.request(n) for n in range(2000)])
    lane = app.store.loop_lane(1)
    assert lane is not None

    async def scenario() -> list[dict[str, Any]]:
        await lane.open()
        try:
            for _ in range(12):
                request = ClaimRequest("default", 2, "looping", 10)
                claimed = await app.store.job_claim_on_loop(lane, request)
                ends = [Completion(j.id, j.lease_token, JobState.SUCCEEDED) for j in claimed]
                assert await app.store.job_complete_on_loop(lane, ends) == {j.id for j in claimed}
            async with lane.statement() as tx:  # the same session: the lane has one
                await tx.cursor.execute("SHOW enable_seqscan")
                assert await tx.cursor.fetchall() == [{"enable_seqscan": "off"}]
                await tx.cursor.execute(
                    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
                )
                return await tx.cursor.fetchall()
        finally:
            await lane.close()

    plans = {
        ("claim" if "promoted AS" in row["statement"] else "complete"): row
        for row in asyncio.run(scenario())
        if "promoted AS" in row["statement"] or "counted AS" in row["statement"]
    }
    assert set(plans) == {"claim", "complete"}, plans
    for row in plans.values():
        assert row["custom_plans"] == 0 and row["generic_plans"] >= 5, row


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("query", ["claim_jobs", "complete_jobs"])
def test_the_loop_lanes_plans_made_on_an_empty_table_read_through_indexes(
    app: due.App, query: str
) -> None:
    """A lane's plan is made once, maybe while the table is empty, and kept as
    it grows to millions of rows: it must not scan the table."""
    params: dict[str, Any] = {
        "queue": "default",
        "limit": 100,
        "promote": 500,
        "worker": "w",
        "lease": 10.0,
        "leases": "{}",
        "tasks": ["work"],
        "now": None,
        "id": [1],
        "token": [1],
        "state": ["succeeded"],
        "result": ["null"],
        "error": [None],
        "retry_in": [None],
        "progress": [None],
        "warning": [None],
        "outcome": ["succeeded"],
        "bucket": [0],
        "seconds": [0.001],
    }
    backend: Any = app.store.backend
    with backend.transaction() as tx:
        for setting in LANE_SETTINGS:
            tx.cursor.execute(setting.replace("SET ", "SET LOCAL ", 1))
        plan = generic_plan(tx, POSTGRES_QUERIES[query], params)
    assert "due_jobs_pkey" in plan and "Seq Scan" not in plan, plan
    if query == "claim_jobs":  # the due jobs and timers in claim order, never sorted
        assert "due_jobs_claim" in plan and "due_jobs_timers" in plan, plan
