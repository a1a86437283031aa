"""Long work in the store, on every backend: checkpoints, progress, pieces under a
parent, cancellation requests, pauses, and the job's own transaction."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import psycopg
import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.jobs import AttemptError
from due.core.records import ClaimRequest, Completion, Lease, PieceSpawn, UnknownTaskSweep
from tests.conftest import START
from tests.helpers.database import table_rows

LEASE = 10.0


@pytest.fixture
def tasks(app: due.App) -> dict[str, due.Task]:
    @app.task(name="backfill", stuck_after="1m")
    def backfill(ctx: due.Context) -> None: ...

    @app.task(name="piece", retry=due.Retry(max_attempts=1))
    def piece(n: int) -> None: ...

    @app.task(name="report", queue="reports")
    def report(summary: dict) -> None: ...

    return {"backfill": backfill, "piece": piece, "report": report}


def claim(app: due.App, queue: str = "default", limit: int = 1, worker: str = "w1") -> list:
    return app.store.job_claim(ClaimRequest(queue, limit, worker, LEASE))


def ended(job_id: int, token: int, state: JobState = JobState.SUCCEEDED) -> Completion:
    error = None
    if state != JobState.SUCCEEDED:
        error = AttemptError(1, "boom", None, START)
    return Completion(job_id, token, state, result="null", error=error, settles=True)


# --- checkpoints ------------------------------------------------------------------


def test_checkpoint_survives_a_lost_lease_and_is_fenced(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    job = tasks["backfill"].enqueue()
    (first,) = claim(app)
    assert first.checkpoint is None
    assert app.store.checkpoint_save(job.id, first.lease_token, json.dumps(1000)) is False
    assert app.get(job.id).checkpoint == 1000
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().requeued == (job.id,)
    (second,) = claim(app, worker="w2")
    assert second.checkpoint == 1000  # the retry resumes here
    # The first attempt wakes up and writes: refused, the cursor stays.
    assert app.store.checkpoint_save(job.id, first.lease_token, json.dumps(5)) is None
    assert app.get(job.id).checkpoint == 1000


# --- progress and stuck jobs ------------------------------------------------------------


def test_progress_rides_on_heartbeats_and_a_job_without_it_is_stuck(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    job = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    progress = json.dumps({"done": 10, "total": 100})
    app.store.job_heartbeat([Lease(job.id, claimed.lease_token, LEASE, progress)])
    assert app.get(job.id).progress == {"done": 10, "total": 100}
    for _ in range(7):  # renewed for 70s, but the progress does not move
        clock.advance("10s")
        app.store.job_heartbeat([Lease(job.id, claimed.lease_token, LEASE)])
    stuck = app.get(job.id)
    assert stuck.stuck and stuck.state == JobState.RUNNING
    assert [j.id for j in app.jobs(stuck=True)] == [job.id]
    assert app.queues()[0].stuck == 1
    moved = json.dumps({"done": 11, "total": 100})
    app.store.job_heartbeat([Lease(job.id, claimed.lease_token, LEASE, moved)])
    assert not app.get(job.id).stuck and app.jobs(stuck=True) == []


def test_a_job_that_never_reports_progress_is_stuck_after_its_start(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    job = tasks["backfill"].enqueue()
    other = tasks["piece"].enqueue(1)  # no stuck_after: never stuck
    claim(app, limit=2)
    clock.advance("59s")
    assert not app.get(job.id).stuck
    clock.advance("2s")
    assert app.get(job.id).stuck and not app.get(other.id).stuck


# --- cancellation of running jobs ---------------------------------------------------


def test_cancel_asks_a_running_job_through_heartbeat_and_checkpoint(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    job = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    reply = app.store.job_heartbeat([Lease(job.id, claimed.lease_token, LEASE)])
    assert reply.cancel_requested == frozenset()
    asked = app.cancel(job.id)
    assert asked.state == JobState.RUNNING and asked.cancel_requested
    reply = app.store.job_heartbeat([Lease(job.id, claimed.lease_token, LEASE)])
    assert reply.extended == {job.id} and reply.cancel_requested == {job.id}
    assert app.store.checkpoint_save(job.id, claimed.lease_token, "1") is True


def test_a_job_asked_to_stop_whose_worker_died_ends_cancelled(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    job = tasks["backfill"].enqueue()
    claim(app)
    app.cancel(job.id)
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().cancelled == (job.id,)
    assert app.get(job.id).state == JobState.CANCELLED
    assert claim(app) == []
    retried = app.retry(job.id)  # a retry starts afresh, not asked to stop
    assert retried.state == JobState.QUEUED and not retried.cancel_requested


@pytest.mark.parametrize(
    ("end", "says"),
    [
        (JobState.QUEUED, "its attempt had failed"),
        (JobState.FAILED, "its attempt had failed"),
        (JobState.SUCCEEDED, "its attempt had succeeded (result kept)"),
    ],
)
def test_a_job_asked_to_stop_ends_cancelled_whatever_its_attempt_then_does(
    app: due.App, tasks: dict[str, due.Task], end: JobState, says: str
) -> None:
    """Issue 35, hole 3: the acknowledgement of a failed attempt wrote the retry
    without looking at the request, and the job ran four more attempts."""
    job = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    app.cancel(job.id)
    error = None if end == JobState.SUCCEEDED else AttemptError(1, "boom", None, START)
    completion = Completion(job.id, claimed.lease_token, end, result='"made"', error=error)
    completion.retry_in = 0.0
    assert app.store.job_complete([completion]) == {job.id}
    stopped = app.get(job.id)
    assert stopped.state == JobState.CANCELLED and stopped.finished_at is not None
    assert stopped.last_error == "cancelled on request"
    assert stopped.errors[-1].kind == "cancelled" and says in stopped.errors[-1].error
    if error is not None:
        assert stopped.errors[-2].error == "boom"  # what the attempt did is kept
    else:
        assert stopped.result == "made"
    assert claim(app) == [], "a job asked to stop ran again"
    # The same write tried again (its first reply lost) is known as recorded.
    assert app.store.job_complete([completion]) == {job.id}
    (figures,) = [f for f in app.store.stats_figures() if f.task == "backfill"]
    counted = {outcome: n for outcome, n in figures.window("total").counts.items() if n}
    assert counted == {"cancelled": 1}


def test_a_job_asked_to_stop_commits_nothing_in_its_own_transaction(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    job = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    app.cancel(job.id)
    with (
        pytest.raises(due.JobCancelled),
        app.store.job_transaction(job.id, claimed.lease_token, None),
    ):
        pass
    assert app.get(job.id).state == JobState.RUNNING  # its end is written by its worker


# --- pieces -----------------------------------------------------------------------------


def test_spawn_is_fenced_and_adds_each_piece_once(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    parent = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    pieces = app.piece_jobs("piece", [(n,) for n in range(3)])
    store = app.store
    assert store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, pieces, None, None)) == 3
    # A retried attempt spawns the same items again: nothing is added twice.
    assert store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, pieces, None, None)) == 0
    assert (
        store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token + 7, pieces[:1], None, None))
        is None
    )
    children = app.jobs(parent=parent.id)
    assert sorted(j.args for j in children) == [(0,), (1,), (2,)]
    assert app.get(parent.id).pieces == due.Pieces(total=3, succeeded=0, failed=0)


def test_pieces_end_their_parent_which_runs_its_completion_once(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(n,) for n in range(40)], on_complete="report")
    assert parent.state == JobState.WAITING and parent.pieces.total == 40
    claimed = claim(app, limit=40)
    assert len(claimed) == 40
    # Four workers acknowledge their pieces at the same instant.
    groups = [claimed[n::4] for n in range(4)]
    start = threading.Barrier(4)
    failures: list[BaseException] = []

    def acknowledge(group: list) -> None:
        try:
            start.wait()
            for job in group:
                state = JobState.FAILED if job.args == (7,) else JobState.SUCCEEDED
                app.store.job_complete([ended(job.id, job.lease_token, state)])
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=acknowledge, args=(g,)) for g in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    waiting = app.get(parent.id)
    assert waiting.state == JobState.WAITING
    assert waiting.pieces == due.Pieces(total=40, succeeded=39, failed=1)
    (completion,) = app.jobs(task="report")
    assert completion.args == ({"parent": parent.id, "pieces": 40, "succeeded": 39, "failed": 1},)
    assert completion.queue == "reports"
    (report,) = claim(app, queue="reports")
    app.store.job_complete([ended(report.id, report.lease_token)])
    done = app.get(parent.id)
    assert done.state == JobState.SUCCEEDED
    assert done.result == {"completion": completion.id}


def test_a_pieces_end_that_does_not_say_it_settles_is_still_counted_on_its_parent(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    """An acknowledgement whose completion does not know its job is a piece (an
    end due itself built after a crash) goes the one-statement way on
    PostgreSQL; the parent is settled after it, in a transaction of its own."""
    parent = app.batch("piece", [(n,) for n in range(2)])
    first, second = claim(app, limit=2)
    for job in (first, second):
        unaware = ended(job.id, job.lease_token)
        unaware.settles = False
        assert app.store.job_complete([unaware]) == {job.id}
    done = app.get(parent.id)
    assert done.pieces == due.Pieces(total=2, succeeded=2, failed=0)
    assert done.state == JobState.SUCCEEDED


def test_on_the_loop_lane_too_an_unaware_pieces_end_is_counted_on_its_parent(
    app: due.App, tasks: dict[str, due.Task], backend: str
) -> None:
    """The worker's acknowledgement from its event loop (PostgreSQL) reads the
    rows it wrote a column at a time: one that concerns a parent among them is
    still settled after it, on a thread."""
    lane = app.store.loop_lane(1)
    if lane is None:
        assert backend == "sqlite"
        return
    parent = app.batch("piece", [(n,) for n in range(2)])
    pieces = claim(app, limit=2)
    unaware = [ended(job.id, job.lease_token) for job in pieces]
    for end in unaware:
        end.settles = False

    async def acknowledge() -> set[int] | None:
        await lane.open()
        try:
            return await app.store.job_complete_on_loop(lane, unaware)
        finally:
            await lane.close()

    assert asyncio.run(acknowledge()) == {job.id for job in pieces}
    done = app.get(parent.id)
    assert done.pieces == due.Pieces(total=2, succeeded=2, failed=0)
    assert done.state == JobState.SUCCEEDED


def test_a_failed_piece_fails_the_parent_and_cancels_the_rest(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(n,) for n in range(5)], on_piece_failure="fail")
    (first,) = claim(app)
    app.store.job_complete([ended(first.id, first.lease_token, JobState.FAILED)])
    failed = app.get(parent.id)
    assert failed.state == JobState.FAILED
    assert "1 of 5 pieces did not succeed" in (failed.last_error or "")
    states = sorted(j.state.value for j in app.jobs(parent=parent.id))
    assert states == ["cancelled"] * 4 + ["failed"]
    assert claim(app, limit=10) == []


def test_cancelling_a_waiting_parent_cancels_its_pieces(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(n,) for n in range(3)])
    (running,) = claim(app)
    assert app.cancel(parent.id).state == JobState.CANCELLED
    pieces = {j.id: j for j in app.jobs(parent=parent.id)}
    assert pieces[running.id].cancel_requested  # the running one is asked to stop
    assert sorted(j.state.value for j in pieces.values()) == ["cancelled", "cancelled", "running"]
    # Its late end changes nothing on the ended parent.
    app.store.job_complete([ended(running.id, running.lease_token)])
    assert app.get(parent.id).state == JobState.CANCELLED


def test_an_empty_batch_succeeds_at_once(app: due.App, tasks: dict[str, due.Task]) -> None:
    parent = app.batch("piece", [])
    assert parent.state == JobState.SUCCEEDED


def test_a_bad_piece_refuses_the_whole_batch(app: due.App, tasks: dict[str, due.Task]) -> None:
    with pytest.raises(due.ArgumentsError, match="piece"):
        app.batch("piece", [(1,), (1, 2, 3)])
    with pytest.raises(due.ConfigurationError, match="on_piece_failure"):
        app.batch("piece", [(1,)], on_piece_failure="sometimes")
    assert app.jobs() == []


def test_a_parent_of_pieces_is_not_retried_as_a_whole(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(1,)], on_piece_failure="fail")
    (piece,) = claim(app)
    app.store.job_complete([ended(piece.id, piece.lease_token, JobState.FAILED)])
    with pytest.raises(due.InvalidStateError, match="retry its failed pieces"):
        app.retry(parent.id)


# --- pauses ----------------------------------------------------------------------------


def test_a_paused_queue_keeps_its_jobs_until_resumed(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    job = tasks["piece"].enqueue(1)
    app.pause_queue("default")
    assert claim(app) == []
    assert app.store.job_next_due("default", app.tasks.names()) is None
    overview = next(queue for queue in app.queues() if queue.name == "default")
    assert overview.paused and overview.queued == 1 and overview.due == 1
    app.resume_queue("default")
    assert app.store.job_next_due("default", app.tasks.names()) == START
    assert [c.id for c in claim(app)] == [job.id]
    assert not next(queue for queue in app.queues() if queue.name == "default").paused


def test_a_paused_group_holds_its_pieces_only(app: due.App, tasks: dict[str, due.Task]) -> None:
    parent = app.batch("piece", [(n,) for n in range(3)])
    other = tasks["piece"].enqueue(99)
    app.pause_group(parent.id)
    assert all(j.held for j in app.jobs(parent=parent.id))
    assert [c.id for c in claim(app, limit=10)] == [other.id]
    app.resume_group(parent.id)
    assert len(claim(app, limit=10)) == 3
    with pytest.raises(due.JobNotFoundError):
        app.pause_group(424242)


def test_pieces_spawned_by_a_paused_parent_start_held(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    app.pause_group(parent.id)
    pieces = app.piece_jobs("piece", [(1,), (2,)])
    app.store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, pieces, None, None))
    assert claim(app, limit=10) == []
    app.resume_group(parent.id)
    assert len(claim(app, limit=10)) == 2


# --- the job's own transaction ---------------------------------------------------------


def test_the_jobs_transaction_commits_its_writes_with_its_success(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    job = tasks["piece"].enqueue(1)
    (claimed,) = claim(app)
    with app.store.job_transaction(job.id, claimed.lease_token, None) as conn:
        conn.execute("CREATE TABLE ledger (entry integer PRIMARY KEY)")
        conn.execute("INSERT INTO ledger VALUES (1)")
    assert app.get(job.id).state == JobState.SUCCEEDED
    assert _ledger(app) == [1]


def test_the_jobs_transaction_is_undone_when_the_lease_is_lost(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    job = tasks["backfill"].enqueue()
    (stale,) = claim(app)
    clock.advance(LEASE + 1)
    app.store.job_rescue()
    with (
        pytest.raises(due.LeaseLost),
        app.store.job_transaction(job.id, stale.lease_token, None) as conn,
    ):
        conn.execute("CREATE TABLE ledger (entry integer PRIMARY KEY)")
        conn.execute("INSERT INTO ledger VALUES (1)")
    assert app.get(job.id).state == JobState.QUEUED
    assert _ledger(app) is None  # the table itself was rolled back


def test_a_success_recorded_in_the_callers_transaction_is_fenced(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    pytest.importorskip("sqlalchemy")
    from tests.helpers.sqlalchemy_engines import sync_engine

    engine = sync_engine(app.url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE ledger (entry integer PRIMARY KEY)")
    done, lost = tasks["piece"].enqueue(1), tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    (stale,) = claim(app)
    clock.advance(LEASE + 1)
    app.store.job_rescue()  # both leases are lost: the first job is claimed again,
    (claimed,) = claim(app)  # the second one's stale token stays stale
    assert claimed.id == done.id
    with engine.connect() as conn:
        conn.exec_driver_sql("INSERT INTO ledger VALUES (1)")
        app.store.job_complete_on(done.id, claimed.lease_token, None, conn)
        assert app.get(done.id).state == JobState.RUNNING  # not before the caller commits
        conn.commit()
    with engine.connect() as conn:
        conn.exec_driver_sql("INSERT INTO ledger VALUES (2)")
        with pytest.raises(due.LeaseLost):
            app.store.job_complete_on(lost.id, stale.lease_token, None, conn)
        conn.commit()  # the caller's own row stays theirs to keep
    engine.dispose()
    assert app.get(done.id).state == JobState.SUCCEEDED
    assert app.get(lost.id).state == JobState.QUEUED
    assert _ledger(app) == [1, 2]


def _ledger(app: due.App) -> list[int] | None:
    found = table_rows(app.url, "SELECT entry FROM ledger ORDER BY entry")
    return None if found is None else [row[0] for row in found]


# --- pieces at the edges: retries, nesting, reaping, cancellation -----------------------


def test_retrying_a_failed_piece_gives_its_count_back(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(n,) for n in range(3)], on_complete="report")
    first = claim(app)[0]
    app.store.job_complete([ended(first.id, first.lease_token, JobState.FAILED)])
    assert app.get(parent.id).pieces == due.Pieces(total=3, succeeded=0, failed=1)
    assert app.retry(first.id).state == JobState.QUEUED
    assert app.get(parent.id).pieces == due.Pieces(total=3, succeeded=0, failed=0)
    for _ in range(2):  # the retried piece and the second one succeed
        (job,) = claim(app)
        app.store.job_complete([ended(job.id, job.lease_token)])
    assert app.jobs(task="report") == []  # the third piece has not run: not settled yet
    (last,) = claim(app)
    app.store.job_complete([ended(last.id, last.lease_token)])
    (completion,) = app.jobs(task="report")
    assert completion.args[0]["succeeded"] == 3 and completion.args[0]["failed"] == 0


def test_a_piece_of_a_settled_parent_is_not_retried(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(1,)], on_piece_failure="fail")
    (piece,) = claim(app)
    app.store.job_complete([ended(piece.id, piece.lease_token, JobState.FAILED)])
    assert app.get(parent.id).state == JobState.FAILED
    with pytest.raises(due.InvalidStateError, match="parent"):
        app.retry(piece.id)


def test_a_piece_failed_by_the_unknown_task_reaper_is_counted(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    parent = app.batch("piece", [(1,)])
    clock.advance("10m")
    (failed,) = app.store.job_fail_unknown_tasks(
        UnknownTaskSweep(["default"], ["backfill"], 60.0)
    ).failed
    assert app.get(failed).parent_id == parent.id
    settled = app.get(parent.id)
    assert settled.state == JobState.SUCCEEDED
    assert settled.pieces == due.Pieces(total=1, succeeded=0, failed=1)


def test_a_cancel_that_arrives_as_the_parent_starts_waiting_is_kept(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    app.store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, _pieces(app, 2), None, None))
    app.cancel(parent.id)  # its handler has returned; its WAITING is on the way
    waiting = Completion(parent.id, claimed.lease_token, JobState.WAITING, settles=True)
    assert app.store.job_complete([waiting]) == {parent.id}
    assert app.get(parent.id).state == JobState.CANCELLED
    assert {j.state for j in app.jobs(parent=parent.id)} == {JobState.CANCELLED}


def test_a_parent_that_fails_after_spawning_cancels_its_pieces(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = _one_shot(app).enqueue()
    (claimed,) = claim(app)
    app.store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, _pieces(app, 2), None, None))
    app.store.job_complete([ended(parent.id, claimed.lease_token, JobState.FAILED)])
    assert app.get(parent.id).state == JobState.FAILED
    assert {j.state for j in app.jobs(parent=parent.id)} == {JobState.CANCELLED}


def test_cancelling_a_waiting_parent_cancels_its_completion_job(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(1,)], on_complete="report")
    (piece,) = claim(app)
    app.store.job_complete([ended(piece.id, piece.lease_token)])
    (completion,) = app.jobs(task="report")
    assert completion.state == JobState.QUEUED
    app.cancel(parent.id)
    assert app.get(completion.id).state == JobState.CANCELLED


def test_a_later_spawn_keeps_the_completion_and_the_policy(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    spec = app.completion_spec("report")
    app.store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, _pieces(app, 1), spec, "fail"))
    app.store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, _pieces(app, 2), None, None))
    stored = app.get(parent.id)
    assert stored.pieces == due.Pieces(total=2, succeeded=0, failed=0)  # (1,) came once
    row = _parent_row(app, parent.id)
    assert row == (spec, "fail")


def test_pieces_are_known_by_their_task_and_arguments(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    store = app.store
    # A first attempt spawns 1 and 2, then a resumed one spawns 3 and 4: all count.
    assert (
        store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, _pieces(app, 2), None, None))
        == 2
    )
    more = app.piece_jobs("piece", [(3,), (4,), (1,)])
    assert store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, more, None, None)) == 2
    assert app.get(parent.id).pieces.total == 4
    # The same item twice in one call is two pieces (the second is the "second one").
    twice = app.piece_jobs("piece", [(9,), (9,)])
    assert store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, twice, None, None)) == 2
    assert store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, twice, None, None)) == 0


def test_a_piece_is_refused_a_key_or_a_delay(app: due.App, tasks: dict[str, due.Task]) -> None:
    piece = tasks["piece"]
    with pytest.raises(due.ConfigurationError, match="key"):
        app.batch(piece, [piece.options(key="k").request(1)])
    with pytest.raises(due.ConfigurationError, match="delay"):
        app.batch(piece, [piece.options(delay="1h").request(1)])


def test_a_retried_piece_of_a_paused_group_stays_held(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(1,), (2,)])
    app.pause_group(parent.id)
    first = app.jobs(parent=parent.id)[-1]
    app.cancel(first.id)
    app.retry(first.id)
    assert app.get(first.id).held and claim(app, limit=5) == []
    app.resume_group(parent.id)
    assert len(claim(app, limit=5)) == 2


def test_a_job_asked_to_stop_and_released_at_shutdown_ends_cancelled(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    job = tasks["backfill"].enqueue()
    (claimed,) = claim(app)
    app.cancel(job.id)
    app.store.job_release([Lease(job.id, claimed.lease_token, LEASE)], "worker stopping")
    assert app.get(job.id).state == JobState.CANCELLED
    assert claim(app) == []


def _one_shot(app: due.App) -> due.Task:
    @app.task(name="one_shot", retry=due.Retry(max_attempts=1))
    def one_shot(ctx: due.Context) -> None: ...

    return one_shot


def _pieces(app: due.App, count: int) -> list:
    return app.piece_jobs("piece", [(n,) for n in range(1, count + 1)])


def _parent_row(app: due.App, parent: int) -> tuple:
    (row,) = table_rows(
        app.url, f"SELECT on_complete, on_piece_failure FROM due_jobs WHERE id = {parent}"
    )
    return row


def test_postgres_heartbeats_skip_a_job_whose_row_a_handler_holds(postgres_url: str) -> None:
    """A handler's open transaction holding its job's row (a checkpoint on its own
    connection) must not hold up the renewal of every other lease of the worker."""
    app = due.App(postgres_url)
    app.migrate()

    @app.task(name="work")
    def work() -> None: ...

    try:
        busy, other = work.enqueue(), work.enqueue()
        claimed = {
            job.id: job for job in app.store.job_claim(ClaimRequest("default", 2, "w1", LEASE))
        }
        with psycopg.connect(postgres_url) as conn, conn.transaction():
            token = claimed[busy.id].lease_token
            assert app.store.checkpoint_save(busy.id, token, "1", conn) is False
            leases = [Lease(j.id, j.lease_token, LEASE) for j in claimed.values()]
            reply = app.store.job_heartbeat(leases)  # would wait for the commit without SKIP LOCKED
            assert reply.extended == {other.id}
            assert reply.lost == frozenset()  # busy is neither renewed nor lost
    finally:
        app.close()


def test_postgres_heartbeats_wait_briefly_for_a_row_held_for_a_moment(postgres_url: str) -> None:
    """A parent's row is locked for a moment by every piece that ends: its lease
    must still be renewed (a skipped beat after another would lose it)."""
    app = due.App(postgres_url)
    app.migrate()

    @app.task(name="work")
    def work() -> None: ...

    try:
        job = work.enqueue()
        (claimed,) = app.store.job_claim(ClaimRequest("default", 1, "w1", LEASE))
        held = threading.Event()

        def settle_a_piece() -> None:
            with psycopg.connect(postgres_url) as conn, conn.transaction():
                conn.execute(f"SELECT 1 FROM due_jobs WHERE id = {job.id} FOR UPDATE")
                held.set()
                time.sleep(0.2)

        holder = threading.Thread(target=settle_a_piece)
        holder.start()
        assert held.wait(10)
        reply = app.store.job_heartbeat([Lease(job.id, claimed.lease_token, LEASE, '{"done": 1}')])
        holder.join(10)
        assert reply.extended == {job.id} and reply.lost == frozenset()
        assert app.get(job.id).progress == {"done": 1}
    finally:
        app.close()


def test_a_completion_job_of_an_ended_parent_is_not_retried(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(1,)], on_complete="report")
    (piece,) = claim(app)
    app.store.job_complete([ended(piece.id, piece.lease_token)])
    app.cancel(parent.id)
    (completion,) = app.jobs(task="report")
    assert completion.state == JobState.CANCELLED
    with pytest.raises(due.InvalidStateError, match="completion job whose parent"):
        app.retry(completion.id)


def test_cancelling_a_parent_reaches_the_pieces_of_a_nested_parent_awaiting_a_retry(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    top = app.batch("backfill", [()])
    (nested,) = claim(app)
    app.store.piece_spawn(PieceSpawn(nested.id, nested.lease_token, _pieces(app, 2), None, None))
    retry = Completion(nested.id, nested.lease_token, JobState.QUEUED, retry_in=60, settles=True)
    retry.error = AttemptError(1, "boom", None, START)
    app.store.job_complete([retry])
    assert app.get(nested.id).state == JobState.QUEUED
    app.cancel(top.id)
    assert app.get(nested.id).state == JobState.CANCELLED
    assert {j.state for j in app.jobs(parent=nested.id)} == {JobState.CANCELLED}


def test_a_piece_is_the_same_however_its_arguments_are_spelled(app: due.App) -> None:
    @app.task(name="resize")
    def resize(image: str, width: int = 100, *, crop: bool = False) -> None: ...

    @app.task(name="album")
    def album(ctx: due.Context) -> None: ...

    parent = album.enqueue()
    (claimed,) = claim(app)
    spellings = [
        resize.request("a.png"),
        resize.request("a.png", 100),
        resize.request(image="a.png", crop=False),
        resize.request(crop=False, width=100, image="a.png"),
    ]
    store = app.store
    assert (
        store.piece_spawn(
            PieceSpawn(
                parent.id, claimed.lease_token, app.piece_jobs(resize, spellings[:1]), None, None
            )
        )
        == 1
    )
    for spelling in spellings[1:]:
        pieces = app.piece_jobs(resize, [spelling])
        assert (
            store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, pieces, None, None)) == 0
        )
    other = app.piece_jobs(resize, [resize.request("a.png", 200)])
    assert store.piece_spawn(PieceSpawn(parent.id, claimed.lease_token, other, None, None)) == 1


def test_a_replaced_run_that_waits_for_pieces_ends_with_them(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    """overlap='replace' cancels the previous run: one waiting for its pieces ends
    at once, and its pieces are cancelled, instead of succeeding later."""
    app.schedule("fan", every="1m", task="backfill", overlap="replace")
    app.sync_schedules()
    clock.advance("1m")
    app.store.schedule_materialize("fan", _planner(app))
    (run,) = claim(app)
    app.store.piece_spawn(PieceSpawn(run.id, run.lease_token, _pieces(app, 2), None, None))
    waiting = Completion(run.id, run.lease_token, JobState.WAITING, settles=True)
    app.store.job_complete([waiting])
    clock.advance("1m")
    app.store.schedule_materialize("fan", _planner(app))
    assert app.get(run.id).state == JobState.CANCELLED
    assert {j.state for j in app.jobs(parent=run.id)} == {JobState.CANCELLED}


def _planner(app: due.App):  # type: ignore[no-untyped-def]
    from due.scheduler.planner import plan

    def decide(stored, now, active, pending):  # type: ignore[no-untyped-def]
        return plan(stored.schedule, stored.next_fire_at, now, active=active, pending=pending)

    return decide
