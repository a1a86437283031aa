"""Leases, heartbeats, fencing and rescue, on every backend (invariants 2 and 3)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.jobs import AttemptError
from due.core.records import ClaimedJob, ClaimRequest, Completion, Lease, RescueResult
from tests.conftest import START
from tests.helpers.database import plain_transaction

LEASE = 10.0


@pytest.fixture
def job(app: due.App) -> due.Job:
    @app.task(name="work", retry=due.Retry(max_attempts=5))
    def work() -> None: ...

    return work.enqueue()


def claim_one(app: due.App, worker: str = "w1", started: bool = True):  # type: ignore[no-untyped-def]
    """Claim the next job; `started`: and say, as a worker's heartbeat does, that
    its handler began (only then is the attempt counted)."""
    (claimed,) = app.store.job_claim(ClaimRequest("default", 1, worker, LEASE))
    if started:
        lease = Lease(claimed.id, claimed.lease_token, LEASE, started=True)
        assert app.store.job_heartbeat([lease]).extended == {claimed.id}
    return claimed


def done(job_id: int, token: int) -> Completion:
    return Completion(job_id, token, JobState.SUCCEEDED, result=json.dumps("ok"))


def test_heartbeat_extends_the_lease(app: due.App, job: due.Job, clock: FakeClock) -> None:
    claimed = claim_one(app)
    clock.advance("8s")
    reply = app.store.job_heartbeat([Lease(job.id, claimed.lease_token, LEASE)])
    assert reply.extended == {job.id} and reply.lost == frozenset()
    assert app.get(job.id).lease_expires_at == START + timedelta(seconds=18)
    clock.advance("8s")  # past the first lease, within the renewed one
    assert app.store.job_rescue().count == 0
    clock.advance("3s")
    assert app.store.job_rescue().requeued == (job.id,)


def test_expired_lease_is_rescued_with_the_reason(
    app: due.App, job: due.Job, clock: FakeClock
) -> None:
    claim_one(app, worker="host-a:123")
    clock.advance(LEASE)
    assert app.store.job_rescue().count == 0  # expires strictly after the lease
    clock.advance("1ms")
    result = app.store.job_rescue()
    assert result.requeued == (job.id,) and result.failed == ()
    rescued = app.get(job.id)
    assert rescued.state == JobState.QUEUED and rescued.run_at == job.run_at  # its place
    assert rescued.lease_expires_at is None
    assert rescued.errors[-1].kind == "lease_lost"
    assert "host-a:123" in (rescued.last_error or "")
    again = claim_one(app, worker="w2")
    assert again.attempt == 2 and again.lease_token > 1


def test_a_stale_token_changes_nothing(app: due.App, job: due.Job, clock: FakeClock) -> None:
    stale = claim_one(app, worker="paused")
    clock.advance(LEASE + 1)
    app.store.job_rescue()
    current = claim_one(app, worker="rescuer")
    # The paused worker wakes up and reports: every write is refused.
    assert app.store.job_heartbeat([Lease(job.id, stale.lease_token, LEASE)]).lost == {job.id}
    assert app.store.job_complete([done(job.id, stale.lease_token)]) == set()
    retry = Completion(job.id, stale.lease_token, JobState.QUEUED, retry_in=1)
    assert app.store.job_complete([retry]) == set()
    running = app.get(job.id)
    assert running.state == JobState.RUNNING and running.worker == "rescuer"
    assert running.attempt == 2 and running.result is None
    assert app.store.job_complete([done(job.id, current.lease_token)]) == {job.id}
    assert app.get(job.id).state == JobState.SUCCEEDED


def test_a_late_completion_after_rescue_does_not_revive_the_job(
    app: due.App, job: due.Job, clock: FakeClock
) -> None:
    stale = claim_one(app)
    clock.advance(LEASE + 1)
    app.store.job_rescue()
    assert app.store.job_complete([done(job.id, stale.lease_token)]) == set()
    assert app.get(job.id).state == JobState.QUEUED


def failure(job_id: int, token: int, state: JobState = JobState.FAILED) -> Completion:
    error = AttemptError(1, "ValueError: no", None, START, "error")
    retry_in = 5.0 if state == JobState.QUEUED else None
    return Completion(job_id, token, state, error=error, retry_in=retry_in)


@pytest.mark.parametrize(
    "end",
    [
        lambda claimed: done(claimed.id, claimed.lease_token),
        lambda claimed: failure(claimed.id, claimed.lease_token),
        lambda claimed: failure(claimed.id, claimed.lease_token, JobState.QUEUED),
    ],
    ids=["succeeded", "failed", "retrying"],
)
def test_a_completion_written_again_is_recorded_not_lost(
    app: due.App, job: due.Job, end: Callable[[ClaimedJob], Completion]
) -> None:
    """An acknowledgement whose reply was lost after its commit is written again;
    its tokens are stale by its own doing, and its jobs' ends are recorded."""
    completion = end(claim_one(app))
    assert app.store.job_complete([completion]) == {job.id}
    ended = app.get(job.id)
    assert app.store.job_complete([completion]) == {job.id}
    assert app.get(job.id) == ended  # and nothing written twice


def test_a_completion_after_a_rescue_is_not_taken_for_recorded(
    app: due.App, job: due.Job, clock: FakeClock
) -> None:
    """A rescue also moves the token one past the attempt's, and leaves the state
    a late completion may name: queued (a retry), or failed with no attempts left."""
    stale = claim_one(app)
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().requeued == (job.id,)
    for late in (
        failure(job.id, stale.lease_token, JobState.QUEUED),
        # The store takes a completion without an error of its own too: the
        # lost lease the rescue counted tells them apart.
        Completion(job.id, stale.lease_token, JobState.QUEUED, retry_in=1),
    ):
        assert app.store.job_complete([late]) == set()
    assert app.get(job.id).errors[-1].kind == "lease_lost"


def test_a_late_failure_after_a_rescue_that_gave_up_is_not_taken_for_recorded(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="once", retry=due.Retry(max_attempts=1))
    def once() -> None: ...

    job = once.enqueue()
    stale = claim_one(app)
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().failed == (job.id,)
    assert app.store.job_complete([failure(job.id, stale.lease_token)]) == set()


def test_an_attempt_after_a_rescue_and_a_retry_is_recorded_when_written_again(
    app: due.App, clock: FakeClock
) -> None:
    """The rescue's lease_lost error stays in the job's errors; the next attempt's
    end, written twice, is still recognised as written."""

    @app.task(name="once", retry=due.Retry(max_attempts=1))
    def once() -> None: ...

    job = once.enqueue()
    claim_one(app)
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().failed == (job.id,)
    app.retry(job.id)
    again = claim_one(app)
    assert again.attempt == 1
    end = done(job.id, again.lease_token)
    assert app.store.job_complete([end]) == {job.id}
    assert app.store.job_complete([end]) == {job.id}
    assert app.get(job.id).state == JobState.SUCCEEDED


def test_a_batch_of_completions_applies_only_the_current_tokens(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="batch")
    def batch(n: int) -> None: ...

    jobs = [batch.enqueue(n) for n in range(3)]
    claimed = app.store.job_claim(ClaimRequest("default", 3, "w1", LEASE))
    batch_of = [done(c.id, c.lease_token) for c in claimed]
    batch_of[1] = done(claimed[1].id, claimed[1].lease_token + 7)
    assert app.store.job_complete(batch_of) == {jobs[0].id, jobs[2].id}
    assert app.get(jobs[1].id).state == JobState.RUNNING


def test_heartbeat_of_many_jobs_reports_each(app: due.App, clock: FakeClock) -> None:
    @app.task(name="many")
    def many(n: int) -> None: ...

    for n in range(4):
        many.enqueue(n)
    claimed = app.store.job_claim(ClaimRequest("default", 4, "w1", LEASE))
    leases = [Lease(c.id, c.lease_token, LEASE) for c in claimed]
    leases[2] = Lease(claimed[2].id, 999, LEASE)
    reply = app.store.job_heartbeat(leases)
    assert reply.lost == {claimed[2].id}
    assert reply.extended == {c.id for c in claimed} - {claimed[2].id}


def test_rescue_fails_a_job_with_no_attempts_left(app: due.App, clock: FakeClock) -> None:
    @app.task(name="once", retry=due.Retry(max_attempts=1))
    def once() -> None: ...

    job = once.options(key="once-key").enqueue()
    claim_one(app)
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().failed == (job.id,)
    failed = app.get(job.id)
    assert failed.state == JobState.FAILED and "last attempt" in (failed.last_error or "")
    assert once.options(key="once-key").enqueue().id != job.id  # a failed job releases its key


def test_a_job_that_keeps_killing_its_worker_is_failed_after_n_losses(
    app: due.App, job: due.Job, clock: FakeClock
) -> None:
    for loss in range(1, 4):
        claim_one(app, worker=f"w{loss}")
        clock.advance(LEASE + 1)
        result = app.store.job_rescue(max_lost_leases=3)
        assert (result.failed if loss == 3 else result.requeued) == (job.id,)
    failed = app.get(job.id)
    assert failed.state == JobState.FAILED
    assert "lost its lease 3 times in a row" in (failed.last_error or "")
    assert [e.kind for e in failed.errors] == ["lease_lost"] * 3


def test_a_normal_attempt_end_resets_the_lost_lease_count(
    app: due.App, job: due.Job, clock: FakeClock
) -> None:
    claim_one(app)
    clock.advance(LEASE + 1)
    app.store.job_rescue(max_lost_leases=2)
    again = claim_one(app)
    retry = Completion(job.id, again.lease_token, JobState.QUEUED, retry_in=0)
    app.store.job_complete([retry])
    claim_one(app)
    clock.advance(LEASE + 1)
    assert app.store.job_rescue(max_lost_leases=2).requeued == (job.id,)


def test_rescue_does_not_need_to_know_the_task(
    app: due.App, job: due.Job, backend_url: str, clock: FakeClock
) -> None:
    claim_one(app)
    clock.advance(LEASE + 1)
    stranger = due.App(backend_url, clock=clock)  # registers no task at all
    try:
        assert stranger.store.job_rescue().requeued == (job.id,)
    finally:
        stranger.close()
    assert app.get(job.id).state == JobState.QUEUED


def test_rescue_leaves_live_leases_alone(app: due.App, job: due.Job, clock: FakeClock) -> None:
    claim_one(app)
    clock.advance(LEASE - 1)
    assert app.store.job_rescue().count == 0
    assert app.get(job.id).state == JobState.RUNNING


def test_concurrent_batches_on_the_same_jobs_never_deadlock(app: due.App) -> None:
    """A heartbeat and an acknowledgement of the same jobs, in opposite orders."""

    @app.task(name="many")
    def many(n: int) -> None: ...

    app.enqueue_many([many.request(n) for n in range(400)])
    claimed = app.store.job_claim(ClaimRequest("default", 400, "w1", LEASE))
    leases = [Lease(c.id, c.lease_token, LEASE) for c in reversed(claimed)]
    acks = [done(c.id, c.lease_token) for c in claimed]
    errors: list[BaseException] = []

    def beat() -> None:
        try:
            for _ in range(50):
                app.store.job_heartbeat(leases)
        except BaseException as error:
            errors.append(error)

    def ack() -> None:
        try:
            for start in range(0, 400, 20):  # batches keep arriving while heartbeats run
                app.store.job_complete(acks[start : start + 20])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=beat), threading.Thread(target=ack)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert {job.state for job in app.jobs(limit=500)} == {JobState.SUCCEEDED}


def test_a_rescued_or_released_job_keeps_its_place(app: due.App, clock: FakeClock) -> None:
    """Invariant 10: back in the queue with its own run_at, ahead of newer jobs."""

    @app.task(name="line")
    def line(n: int) -> None: ...

    first = line.enqueue(0)
    claimed = claim_one(app)
    clock.advance("30s")
    later = [line.enqueue(n) for n in range(1, 4)]
    clock.advance(LEASE)
    assert app.store.job_rescue().requeued == (first.id,)
    assert app.get(first.id).run_at == first.run_at
    again = claim_one(app)
    assert again.id == first.id and again.lease_token > claimed.lease_token
    app.store.job_release([Lease(again.id, again.lease_token, LEASE)], "shutdown")
    assert app.get(first.id).run_at == first.run_at
    assert [job.id for job in app.store.job_claim(ClaimRequest("default", 4, "w", LEASE))] == [
        first.id,
        *(job.id for job in later),
    ]


def test_one_locked_row_does_not_stall_the_rescue_of_others(
    postgres_url: str, clock: FakeClock
) -> None:
    """A handler's open transaction on its own job row (ctx.checkpoint(connection=))
    must not hold back the rescue of every other dead worker's job. (PostgreSQL
    only: on SQLite one held write lock stalls every writer alike, documented.)"""
    with due.App(postgres_url, clock=clock) as app:
        app.migrate()
        held, free = _two_dead_jobs(app, clock)
        with psycopg.connect(postgres_url) as handler:  # its transaction, left open
            handler.execute("UPDATE due_jobs SET checkpoint = '1' WHERE id = %s", (held.id,))
            done = threading.Event()
            result: list[RescueResult] = []

            def rescue() -> None:
                result.append(app.store.job_rescue())
                done.set()

            threading.Thread(target=rescue, daemon=True).start()
            assert done.wait(10), "the rescue waited for the locked row"
            handler.rollback()
        assert result[0].requeued == (free.id,)
        assert app.store.job_rescue().requeued == (held.id,)  # once the row is free again


def _two_dead_jobs(app: due.App, clock: FakeClock) -> tuple[due.Job, due.Job]:
    @app.task(name="dead")
    def dead(n: int) -> None: ...

    held, free = dead.enqueue(1), dead.enqueue(2)
    app.store.job_claim(ClaimRequest("default", 2, "gone", LEASE))
    clock.advance(LEASE + 1)
    return held, free


# --- only a start that ran is an attempt (issue 35, holes 2 and 4) -----------------


def test_a_claim_whose_worker_never_said_it_started_costs_no_attempt(
    app: due.App, clock: FakeClock
) -> None:
    """The claim committed, but its worker never had the job in hand (the reply
    was lost with the connection, or the worker died first): once the lease
    expires the job goes back without spending its one attempt, and its
    history says why."""

    @app.task(name="once", retry=due.Retry(max_attempts=1))
    def once() -> None: ...

    job = once.enqueue()
    claim_one(app, worker="lost-reply", started=False)
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().requeued == (job.id,)
    back = app.get(job.id)
    assert back.state == JobState.QUEUED and back.attempt == 0 and back.run_at == job.run_at
    assert back.errors[-1].kind == "lease_lost"
    note = back.last_error or ""
    assert "never said its handler began" in note and "not counted" in note
    again = claim_one(app, worker="w2")
    assert again.attempt == 1
    assert app.store.job_complete([done(job.id, again.lease_token)]) == {job.id}
    assert app.get(job.id).state == JobState.SUCCEEDED


def test_a_start_said_by_a_heartbeat_counts_the_attempt(app: due.App, clock: FakeClock) -> None:
    @app.task(name="once", retry=due.Retry(max_attempts=1))
    def once() -> None: ...

    job = once.enqueue()
    claimed = claim_one(app, started=False)
    plain = Lease(job.id, claimed.lease_token, LEASE)
    assert app.store.job_heartbeat([plain]).extended == {job.id}  # renewed, start not said
    assert app.store.job_heartbeat([Lease(job.id, claimed.lease_token, LEASE, started=True)])
    assert app.store.job_heartbeat([plain]).extended == {job.id}  # said once: it stays said
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().failed == (job.id,)
    assert "last attempt" in (app.get(job.id).last_error or "")


def test_a_checkpoint_says_the_start_too(app: due.App, clock: FakeClock) -> None:
    @app.task(name="once", retry=due.Retry(max_attempts=1))
    def once() -> None: ...

    job = once.enqueue()
    claimed = claim_one(app, started=False)
    assert app.store.checkpoint_save(job.id, claimed.lease_token, "1") is False
    clock.advance(LEASE + 1)
    assert app.store.job_rescue().failed == (job.id,)


def test_a_job_never_started_is_still_bounded_by_the_lost_leases(
    app: due.App, job: due.Job, clock: FakeClock
) -> None:
    """A job that kills its worker before the start is said still stops killing
    workers after --max-lost-leases."""
    for loss in range(1, 4):
        claim_one(app, worker=f"w{loss}", started=False)
        clock.advance(LEASE + 1)
        result = app.store.job_rescue(max_lost_leases=3)
        assert (result.failed if loss == 3 else result.requeued) == (job.id,)
    failed = app.get(job.id)
    assert failed.state == JobState.FAILED and failed.attempt == 0
    assert "lost its lease 3 times in a row" in (failed.last_error or "")


def test_a_job_handed_back_while_its_thread_runs_is_due_only_once_its_lease_expires(
    app: due.App, clock: FakeClock
) -> None:
    """At shutdown, a job whose sync handler thread still runs (nothing can
    interrupt it) is handed back as it stands: its token moves on, so that
    thread can write nothing more; no other worker can take it before the
    lease it held expires; then it goes back without spending an attempt or
    counting a lost lease, however many deploys interrupt it."""

    @app.task(name="once", retry=due.Retry(max_attempts=1))
    def once() -> None: ...

    job = once.enqueue()
    for deploy in range(4):
        held = claim_one(app, worker=f"old-{deploy}")
        lease = Lease(job.id, held.lease_token, LEASE)
        assert app.store.job_release([lease], "released at shutdown", later={job.id}) == {job.id}
        handed = app.get(job.id)
        assert handed.state == JobState.RUNNING and handed.lease_expires_at is not None
        assert "due again once its lease expires" in handed.errors[-1].error
        assert app.store.job_heartbeat([lease]).lost == {job.id}  # fenced
        assert app.store.job_complete([done(job.id, held.lease_token)]) == set()
        assert app.store.job_claim(ClaimRequest("default", 1, "new", LEASE)) == []
        clock.advance(LEASE - 1)
        assert app.store.job_rescue().count == 0  # not before its lease expires
        clock.advance(2)
        assert app.store.job_rescue().requeued == (job.id,)
        back = app.get(job.id)
        assert back.state == JobState.QUEUED and back.attempt == 0 and back.run_at == job.run_at
    assert "handed back" in (app.get(job.id).last_error or "")


def test_a_job_handed_back_waits_for_at_most_the_hand_backs_bound(
    app: due.App, clock: FakeClock
) -> None:
    """A task's lease may be a day: its job, handed back at a deploy, waited for
    all of it. The lease is cut to end at most `handback_seconds` on."""

    @app.task(name="daylong", lease="1d")
    def daylong() -> None: ...

    job = daylong.enqueue()
    (held,) = app.store.job_claim(
        ClaimRequest("default", 1, "old", LEASE, None, {"daylong": 86400})
    )
    lease = Lease(job.id, held.lease_token, 86400.0)
    app.store.job_release([lease], "released at shutdown", later={job.id}, handback_seconds=10)
    clock.advance(9)
    assert app.store.job_rescue().count == 0
    clock.advance(2)
    assert app.store.job_rescue().requeued == (job.id,)
    assert app.get(job.id).attempt == 0


def test_a_job_asked_to_stop_and_handed_back_while_its_thread_runs_ends_cancelled(
    app: due.App, job: due.Job
) -> None:
    held = claim_one(app)
    app.cancel(job.id)
    lease = Lease(job.id, held.lease_token, LEASE)
    app.store.job_release([lease], "released at shutdown", later={job.id})
    stopped = app.get(job.id)
    assert stopped.state == JobState.CANCELLED and stopped.lease_expires_at is None


def test_a_history_changed_outside_due_stops_no_rescue(app: due.App, clock: FakeClock) -> None:
    """SQLite keeps `errors` as text: one row whose history is not JSON (changed by
    hand) made every rescue fail, and every other expired job stayed running."""
    if not app.url.startswith("sqlite"):
        return  # jsonb: PostgreSQL refuses such a value where it is written

    @app.task(name="work")
    def work(n: int) -> None: ...

    jobs = [work.enqueue(n) for n in range(2)]
    app.store.job_claim(ClaimRequest("default", 2, "gone", LEASE))
    with plain_transaction(app.url) as conn:
        conn.execute("UPDATE due_jobs SET errors = '{bad' WHERE id = ?", (jobs[0].id,))
    clock.advance(LEASE + 1)
    assert set(app.store.job_rescue().requeued) == {job.id for job in jobs}
    kept = app.get(jobs[0].id)
    assert kept.state == JobState.QUEUED and kept.errors[-1].kind == "lease_lost"
