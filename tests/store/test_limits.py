"""Limits in the claim, on a real SQLite file and a real PostgreSQL: a job over
a limit stays queued with no attempt spent, waits out of every claim index,
and is claimed once its limit has room; slots free when a run ends however
it ends (success, rescue, release); the rate is a sliding window."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

import due
from due.clock import FakeClock
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion, Lease
from tests.helpers.database import rows


@pytest.fixture
def limited(app: due.App) -> dict[str, due.Task]:
    app.limit("exports", concurrency=2)
    app.limit("stripe", rate="3/s")
    app.limit("account-sync", concurrency=1)

    @app.task(name="export", limits=["exports"])
    def export(n: int) -> None: ...

    @app.task(name="charge", limits=["stripe"])
    def charge(n: int) -> None: ...

    @app.task(name="sync", limits={"account-sync": lambda account, n=0: f"acct-{account}"})
    def sync(account: int, n: int = 0) -> None: ...

    @app.task(name="free")
    def free(n: int) -> None: ...

    app.sync_limits()
    return {"export": export, "charge": charge, "sync": sync, "free": free}


def claim(app: due.App, limit: int = 10, *, lease: float = 30) -> list[int]:
    request = ClaimRequest("default", limit, "w", lease, limited=True)
    return [job.id for job in app.store.job_claim(request)]


def succeed(app: due.App, job_id: int) -> None:
    job = app.get(job_id)
    token = rows(app.url, f"SELECT lease_token FROM due_jobs WHERE id = {job.id}")[0][0]
    assert app.store.job_complete([Completion(job.id, token, JobState.SUCCEEDED)]) == {job.id}


def waiting_for(app: due.App) -> dict[int, tuple[str, str]]:
    return {
        job_id: (name, key)
        for job_id, name, key in rows(
            app.url,
            "SELECT id, limit_wait, limit_wait_key FROM due_jobs WHERE limit_wait IS NOT NULL",
        )
    }


def test_concurrency_leases_as_many_as_the_limit_and_the_rest_wait_without_an_attempt(
    app: due.App, limited: dict[str, due.Task]
) -> None:
    jobs = [limited["export"].enqueue(n).id for n in range(5)]
    assert claim(app) == jobs[:2]
    assert waiting_for(app) == {job: ("exports", "") for job in jobs[2:]}
    assert [app.get(job).attempt for job in jobs[2:]] == [0, 0, 0]
    assert claim(app) == []  # full: nothing more, and nothing spent

    succeed(app, jobs[0])
    assert claim(app) == [jobs[2]]  # the best waiting job takes the freed slot
    assert {app.get(job).state for job in jobs[3:]} == {JobState.QUEUED}


def test_a_key_function_limits_per_key(app: due.App, limited: dict[str, due.Task]) -> None:
    first = limited["sync"].enqueue(7).id
    second = limited["sync"].enqueue(7, 1).id
    other = limited["sync"].enqueue(8).id
    given = limited["sync"].options(limit_keys={"account-sync": "acct-8"}).enqueue(9).id
    assert claim(app) == [first, other]
    assert waiting_for(app) == {
        second: ("account-sync", "acct-7"),
        given: ("account-sync", "acct-8"),
    }
    stored = rows(app.url, f"SELECT limits FROM due_jobs WHERE id = {given}")[0][0]
    assert "acct-8" in str(stored)


def test_the_rate_is_a_sliding_window(
    app: due.App, limited: dict[str, due.Task], clock: FakeClock
) -> None:
    """3/s: a start counts for its second and the 50 ms a handler may take to
    begin after it (the tolerance), so its window is 1.05 s long."""
    jobs = [limited["charge"].enqueue(n).id for n in range(10)]
    assert len(claim(app)) == 3
    clock.advance(0.5)
    assert claim(app) == []
    # The window opening is the wake-up time of the queue's workers.
    assert app.store.job_next_due("default", ["charge"], limited=True) == (
        clock.now() + timedelta(seconds=0.55)
    )
    clock.advance(0.5)
    assert claim(app, 1) == []  # a second on: a handler of the first three may begin yet
    clock.advance(0.05)  # 1.05 s after the first three: they leave the window
    assert len(claim(app, 2)) == 2
    clock.advance(0.5)
    assert len(claim(app)) == 1  # 2 in (0.5 s, 1.55 s]: one more fits
    starts = sorted(app.get(job).started_at for job in jobs if app.get(job).started_at)
    for i, start in enumerate(starts):  # no window of 1.05 s holds more than three
        assert sum(1 for s in starts[i:] if s < start + timedelta(seconds=1.05)) <= 3


def test_limited_jobs_never_block_the_jobs_behind_them(
    app: due.App, limited: dict[str, due.Task]
) -> None:
    backlog = [limited["sync"].options(priority=10).enqueue(1, n).id for n in range(200)]
    free = [limited["free"].enqueue(n).id for n in range(5)]
    assert sorted(claim(app, 10)) == sorted([backlog[0], *free])
    # An ordinary claim (a worker that knows no limit) never even reads them.
    plain = app.store.job_claim(ClaimRequest("default", 10, "w", 30))
    assert plain == []


def test_a_rescued_or_released_run_frees_its_slot(
    app: due.App, limited: dict[str, due.Task], clock: FakeClock
) -> None:
    jobs = [limited["export"].enqueue(n).id for n in range(4)]
    assert claim(app, lease=5) == jobs[:2]
    clock.advance(6)
    assert sorted(app.store.job_rescue().requeued) == jobs[:2]  # the slots free
    assert sorted(claim(app)) == sorted(jobs[:2])
    token = rows(app.url, f"SELECT lease_token FROM due_jobs WHERE id = {jobs[0]}")[0][0]
    assert app.store.job_release([Lease(jobs[0], token, 30)], "stopping") == {jobs[0]}
    assert claim(app) == [jobs[0]]


def test_an_operators_numbers_hold_until_reset(app: due.App, limited: dict[str, due.Task]) -> None:
    jobs = [limited["export"].enqueue(n).id for n in range(6)]
    assert len(claim(app)) == 2
    app.set_limit("exports", concurrency=4)
    app.sync_limits()  # a worker starting with the code's numbers does not undo it
    assert len(claim(app)) == 2  # the waiting jobs are let go as the limit has room
    (overview,) = [o for o in app.limit_overview() if o.name == "exports"]
    assert (overview.limit.concurrency, overview.code.concurrency) == (4, 2)
    assert (overview.running, overview.waiting, overview.overridden) == (4, 2, True)
    app.reset_limit("exports")
    assert claim(app) == []
    assert app.store.limit_reopen() == 0
    assert {app.get(job).state for job in jobs} == {JobState.RUNNING, JobState.QUEUED}
    with pytest.raises(due.ConfigurationError, match="no limit 'nope'"):
        app.set_limit("nope", concurrency=1)


def test_a_waiting_job_can_be_cancelled(app: due.App, limited: dict[str, due.Task]) -> None:
    jobs = [limited["export"].enqueue(n).id for n in range(3)]
    claim(app)
    app.cancel(jobs[2])
    assert app.get(jobs[2]).state == JobState.CANCELLED
    succeed(app, jobs[0])
    assert claim(app) == []  # nothing left to let go


def test_claims_from_many_threads_never_exceed_a_limit(
    app: due.App, limited: dict[str, due.Task]
) -> None:
    """Claimers side by side (on PostgreSQL, each its own transaction under SKIP
    LOCKED): the key's lock makes each count what the others leased."""
    jobs = [limited["export"].enqueue(n).id for n in range(40)]
    claimed: list[int] = []
    lock = threading.Lock()

    def claimer() -> None:
        for _ in range(5):
            got = claim(app, 3)
            with lock:
                claimed.extend(got)

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 2
    assert len(set(jobs) - set(claimed)) == 38


def test_bad_limits_are_refused_naming_what_to_fix(app: due.App) -> None:
    with pytest.raises(due.ConfigurationError, match="must be written N/period"):
        app.limit("x", rate="ten/s")
    with pytest.raises(due.ConfigurationError, match="1 to 1,000,000 jobs"):
        app.limit("x", rate="0/s")
    with pytest.raises(due.ConfigurationError, match="give rate="):
        app.limit("x")
    with pytest.raises(due.ConfigurationError, match="does not declare"):

        @app.task(limits=["unknown"])
        def nope() -> None: ...

    app.limit("per-key", concurrency=1)

    @app.task(name="keyed", limits={"per-key": lambda n: n})
    def keyed(n: object) -> None: ...

    @app.task(name="raising", limits={"per-key": lambda n: 1 / 0})
    def raising(n: int) -> None: ...

    with pytest.raises(due.InvalidJobError, match="non-empty string"):
        keyed.enqueue(7)
    with pytest.raises(due.InvalidJobError, match="raised ZeroDivisionError"):
        raising.enqueue(7)
    with pytest.raises(due.InvalidJobError, match="not a limit of this task"):
        keyed.options(limit_keys={"other": "x"}).enqueue("x")
    assert app.jobs() == []  # nothing written


def test_pieces_and_scheduled_runs_count_against_their_tasks_limits(
    app: due.App, limited: dict[str, due.Task], clock: FakeClock
) -> None:
    from due.scheduler.service import decide

    batch = app.batch(limited["export"], [(n,) for n in range(4)])
    assert len(claim(app)) == 2  # two pieces of four: the exports limit holds them
    app.schedule("nightly", every="1h", task=limited["sync"], args=(7,))
    app.sync_schedules()
    clock.advance(3600)
    for name in app.store.schedule_due_names():
        app.store.schedule_materialize(name, decide)
    scheduled = [job for job in app.jobs(limit=100) if job.schedule == "nightly"]
    assert len(scheduled) == 1
    assert claim(app) == [scheduled[0].id]  # its key acct-7 is free: it starts
    limited["sync"].enqueue(7)
    assert claim(app) == []  # acct-7 is busy with the scheduled run
    assert {key for _, key in waiting_for(app).values()} >= {"acct-7", ""}
    assert app.get(batch.id).state == JobState.WAITING


def test_the_store_keeps_code_numbers_and_an_operators_apart(app: due.App) -> None:
    from due.core.limits import Limit

    app.store.limit_sync([Limit("exports", concurrency=2), Limit("stripe", rate=5, period=1.0)])
    assert app.store.limit_set(Limit("exports", concurrency=7)) is True
    assert app.store.limit_set(Limit("unknown", concurrency=1)) is False
    app.store.limit_sync([Limit("exports", concurrency=3)])  # new code numbers, operator's stay
    numbers = {
        o.name: (o.limit.concurrency, o.code.concurrency, o.overridden)
        for o in app.store.limit_overview()
    }
    assert numbers["exports"] == (7, 3, True)
    assert app.store.limit_reset("exports") is True
    assert app.store.limit_reset("unknown") is False
    (exports,) = [o for o in app.store.limit_overview() if o.name == "exports"]
    assert (exports.limit.concurrency, exports.overridden) == (3, False)


# --- found in review: waits that never end, counts that mix keys, bad input ---------


def test_a_waiting_job_cancelled_then_retried_is_claimed(
    app: due.App, limited: dict[str, due.Task]
) -> None:
    first, second = (limited["export"].enqueue(n).id for n in range(2))
    third = limited["export"].enqueue(2).id
    assert set(claim(app)) == {first, second}
    assert waiting_for(app) == {third: ("exports", "")}
    app.cancel(third)
    succeed(app, first)
    assert claim(app) == []  # the key looked at again: nothing waits now
    app.retry(third)
    assert waiting_for(app) == {}
    assert claim(app) == [third]


def test_a_waiting_job_whose_row_another_transaction_holds_is_not_forgotten(
    postgres_url: str, clock: FakeClock
) -> None:
    """PostgreSQL only: SQLite's one writer lets no transaction hold a row while
    a claim runs. A reopen skips a locked row (SKIP LOCKED), and must not take
    the key for settled because of it."""
    import psycopg

    app = due.App(postgres_url, clock=clock)
    app.migrate()
    try:
        app.limit("exports", concurrency=1)

        @app.task(name="export", limits=["exports"])
        def export(n: int) -> None: ...

        app.sync_limits()
        first, second = export.enqueue(0).id, export.enqueue(1).id
        assert claim(app) == [first]
        succeed(app, first)
        with psycopg.connect(app.url) as other:
            other.execute(f"SELECT id FROM due_jobs WHERE id = {second} FOR UPDATE")
            assert claim(app) == []  # its row is held: not let go this time
        assert claim(app) == [second]
    finally:
        app.close()


def test_every_waiting_key_is_looked_at_however_many_wait_without_room(app: due.App) -> None:
    app.limit("acct", concurrency=1)

    @app.task(name="sync", limits={"acct": lambda account, n=0: f"k{account:04d}"})
    def sync(account: int, n: int = 0) -> None: ...

    app.sync_limits()
    keys = 210  # more than a look takes (REOPEN_KEYS_PER_LOOK)
    first = [sync.enqueue(account).id for account in range(keys)]
    [sync.enqueue(account, 1) for account in range(keys)]
    assert len(claim(app, 1000)) == keys
    for job in first[200:]:  # the last keys' runs end; the first 200 run on
        succeed(app, job)
    freed = {f"k{account:04d}" for account in range(200, keys)}
    claimed: list[int] = []
    for _ in range(3):
        claimed += claim(app, 100)
    assert len(claimed) == len(freed)
    assert {key for _, key in waiting_for(app).values()} & freed == set()


def test_raising_a_rate_lets_its_waiting_jobs_go_at_the_next_claim(app: due.App) -> None:
    app.limit("slow", rate="1/h")

    @app.task(name="t", limits=["slow"])
    def t(n: int) -> None: ...

    app.sync_limits()
    jobs = [t.enqueue(n).id for n in range(5)]
    assert len(claim(app)) == 1
    assert claim(app) == []
    app.set_limit("slow", rate="100/s")
    assert len(claim(app)) == 4
    assert {app.get(job).state for job in jobs} == {JobState.RUNNING}


def test_a_key_that_spells_the_limit_s_name_counts_only_its_own_runs(app: due.App) -> None:
    app.limit("tenant", concurrency=1)

    @app.task(name="work", limits={"tenant": lambda tenant: tenant})
    def work(tenant: str) -> None: ...

    app.sync_limits()
    acme, named = work.enqueue("acme").id, work.enqueue("tenant").id
    assert set(claim(app)) == {acme, named}
    succeed(app, named)
    again = work.enqueue("tenant").id
    assert claim(app) == [again]  # only acme runs: key "tenant" has room


def test_a_limit_is_written_before_its_app_s_first_enqueue(app: due.App) -> None:
    app.limit("fresh", concurrency=1)

    @app.task(name="t", limits=["fresh"])
    def t(n: int) -> None: ...

    jobs = [t.enqueue(n).id for n in range(3)]  # no worker has written "fresh" yet
    assert [o.name for o in app.limit_overview()] == ["fresh"]
    assert len(claim(app)) == 1
    assert sum(app.get(job).state == JobState.RUNNING for job in jobs) == 1


def test_keys_and_options_that_cannot_hold_are_refused_with_what_to_fix(
    app: due.App, limited: dict[str, due.Task]
) -> None:
    with pytest.raises(due.InvalidJobError, match="NUL"):
        limited["sync"].options(limit_keys={"account-sync": "a\x00b"}).enqueue(1)
    with pytest.raises(due.InvalidJobError, match="limit_keys= takes a mapping"):
        limited["sync"].options(limit_keys="acct-1").enqueue(1)  # type: ignore[arg-type]
    with pytest.raises(due.ConfigurationError, match="limit names"):
        app.task(name="odd", limits=[["exports"]])(lambda: None)  # type: ignore[list-item]
    with pytest.raises(due.ConfigurationError):
        app.limit("arabic", rate="\u0665/s")  # an Arabic-Indic five
    assert app.jobs(limit=10) == []


def test_a_workflow_s_limited_step_finds_its_limit_written(app: due.App) -> None:
    app.limit("late", concurrency=1)

    @app.task(name="t", limits=["late"])
    def t(n: int) -> None: ...

    flow = app.workflow("limited")
    flow.add(t.request(1), name="one")
    flow.add(t.request(2), name="two")
    flow.enqueue()  # the first enqueue of this app: no worker wrote "late" yet
    assert [o.name for o in app.limit_overview()] == ["late"]
    assert len(claim(app)) == 1
