"""One-job async enqueues made side by side on one event loop: those that come
while the loop's statement runs wait for it, and are written together in the
next one (store/enqueue_groups.py), each caller given its own job.

The scenarios make the crowd certain rather than likely: another session
holds a lock, so the loop's write waits while the other coroutines enqueue;
then the lock goes (`Holder`). On SQLite a group is one transaction on a
thread; on PostgreSQL one statement from the loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterator

import pytest

import due
from due.errors import StoreError
from tests.helpers.handles import assert_each_handle_is_its_row
from tests.helpers.waiting import wait_until
from tests.helpers.write_lock import WriteLock
from tests.store.test_loop_connections import (
    an_insert_waits_for,
    make_app,
    run_counting,
    stored,
)

CROWD = 50


def stored_args(app: due.App) -> list[int]:
    return sorted(job.args[0] for job in app.jobs(limit=10_000))


class Holder(WriteLock):
    """Keeps the loop's write of one job waiting, from another session, while
    the crowd comes; then lets it go. PostgreSQL: a table lock makes the loop's
    statement wait on the server (after the loop's first enqueue, on a thread,
    and its second, which opens the loop's connection). SQLite: another
    connection's write lock makes the loop's write, on a thread, wait."""

    def __init__(self, backend: str, url: str) -> None:
        super().__init__(backend, url)
        self.before = [0, 1, 2] if backend == "postgres" else [0]
        """The jobs the holding enqueues (the last one is the held one)."""
        self.group_threads = 0 if backend == "postgres" else 1
        """Threads a group's write takes."""
        self.threads = 2 if backend == "postgres" else 1
        """Threads the holding takes: PostgreSQL, the loop's first enqueue and the
        test's wait for the lock; SQLite, the held write."""

    async def hold(self, t: due.Task[..., None]) -> asyncio.Task[due.Job]:
        if self.backend == "postgres":
            await t.aenqueue(0)
            await t.aenqueue(1)
            self.take()
            held = asyncio.create_task(t.aenqueue(2))
            await asyncio.to_thread(wait_until, an_insert_waits_for(self.postgres), 10)
            return held
        self.take()  # the loop's write waits for it
        held = asyncio.create_task(t.aenqueue(0))
        await asyncio.sleep(0)  # it has begun its write: the group is writing
        return held


@pytest.fixture
def grouped(
    backend: str, backend_url: str
) -> Iterator[tuple[due.App, due.Task[..., None], Holder]]:
    app, t = make_app(backend_url)
    holder = Holder(backend, backend_url)
    try:
        yield app, t, holder
    finally:
        holder.close()
        app.close()


async def behind_the_held_write(
    holder: Holder, t: due.Task[..., None], calls: list[Callable[[], Awaitable[due.Job]]]
) -> tuple[due.Job, list[due.Job | BaseException]]:
    """The held write's job, and what each call of the crowd behind it gave."""
    held = await holder.hold(t)
    crowd = [asyncio.create_task(call()) for call in calls]
    await asyncio.sleep(0)  # each has joined the group
    holder.release()
    return await held, list(await asyncio.gather(*crowd, return_exceptions=True))


def test_enqueues_that_wait_for_the_loops_write_are_written_in_one_after_it(
    grouped: tuple[due.App, due.Task[..., None], Holder],
) -> None:
    app, t, holder = grouped
    numbers = range(10, 10 + CROWD)
    calls = [functools.partial(t.options(delay=60 if n % 2 else 0).aenqueue, n) for n in numbers]
    (held, crowd), threads = run_counting(lambda: behind_the_held_write(holder, t, calls))
    assert threads == holder.threads + holder.group_threads, "one write for the whole crowd"
    jobs = [job for job in crowd if isinstance(job, due.Job)]
    assert [job.args for job in jobs] == [(n,) for n in numbers]
    assert held.args == (holder.before[-1],)
    assert stored_args(app) == [*holder.before, *numbers]
    assert len({job.created_at for job in jobs}) == 1, "one statement, one transaction"
    assert held.created_at != jobs[0].created_at, "the held write wrote its job alone"
    assert_each_handle_is_its_row(app, jobs)


BAD_ROW = {
    # A row the database refuses: the group's write wrote nothing, and each of
    # its requests is then made alone.
    "refused": {
        "postgres": "ALTER TABLE due_jobs ADD CONSTRAINT no_refused CHECK (task <> 'refused')",
        # RAISE(ROLLBACK): SQLite ends the transaction itself, and says why.
        "sqlite": "CREATE TRIGGER refuse BEFORE INSERT ON due_jobs WHEN NEW.task = 'refused'"
        " BEGIN SELECT RAISE(ROLLBACK, 'no_refused'); END",
    },
    # A row a trigger of the user's skips without an error: PostgreSQL's group
    # statement has committed the others; SQLite's transaction is rolled back
    # (nothing was stored) and each request is then made alone.
    "skipped": {
        "postgres": "CREATE FUNCTION skip_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " RETURN NULL; END $$; CREATE TRIGGER skip_row BEFORE INSERT ON due_jobs FOR EACH ROW"
        " WHEN (NEW.task = 'skipped') EXECUTE FUNCTION skip_row()",
        "sqlite": "CREATE TRIGGER skip_row BEFORE INSERT ON due_jobs WHEN NEW.task = 'skipped'"
        " BEGIN SELECT RAISE(IGNORE); END",
    },
}


@pytest.mark.parametrize(
    ("bad", "says", "made_alone"),
    [
        ("refused", "no_refused", {"postgres": 6, "sqlite": 6}),
        ("skipped", "did not store", {"postgres": 0, "sqlite": 6}),
    ],
)
def test_a_bad_row_in_a_group_fails_only_its_own_caller(
    grouped: tuple[due.App, due.Task[..., None], Holder],
    backend: str,
    bad: str,
    says: str,
    made_alone: dict[str, int],
) -> None:
    """Its caller gets the error; the others get their jobs, each stored once."""
    app, t, holder = grouped
    bad_task = app.task(name=bad)(lambda n: None)
    holder.run(BAD_ROW[bad][backend])
    calls = [functools.partial(t.aenqueue, n) for n in range(10, 15)]
    calls.insert(2, functools.partial(bad_task.aenqueue, 99))
    (_, outcomes), threads = run_counting(lambda: behind_the_held_write(holder, t, calls))
    error = outcomes.pop(2)
    assert isinstance(error, StoreError) and says in str(error), error
    assert [job.args for job in outcomes if isinstance(job, due.Job)] == [
        (n,) for n in range(10, 15)
    ]
    assert stored_args(app) == [*holder.before, *range(10, 15)]
    assert threads == holder.threads + holder.group_threads + made_alone[backend]


def test_an_error_met_after_the_commit_goes_to_every_caller_and_nothing_is_sent_again(
    postgres_url: str,
) -> None:
    """The group committed, then its reply could not be read (a trigger of the
    user's moved one job's due time past what Python's datetime holds): every
    caller gets the error, and no job is created a second time."""
    app, t = make_app(postgres_url)
    far = app.task(name="far")(lambda n: None)
    holder = Holder("postgres", postgres_url)
    holder.run(
        "CREATE FUNCTION far_off() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " NEW.run_at := '20000-01-01 00:00+00'; RETURN NEW; END $$;"
        " CREATE TRIGGER far_off BEFORE INSERT ON due_jobs FOR EACH ROW"
        " WHEN (NEW.task = 'far') EXECUTE FUNCTION far_off()"
    )
    calls = [functools.partial(t.aenqueue, n) for n in range(10, 15)]
    calls.append(functools.partial(far.aenqueue, 99))
    try:
        (_, outcomes), threads = run_counting(lambda: behind_the_held_write(holder, t, calls))
        assert all(isinstance(outcome, StoreError) for outcome in outcomes), outcomes
        assert "year" in str(outcomes[-1]), outcomes[-1]
        assert stored(postgres_url) == [0, 1, 2, *range(10, 15), 99], "each once"
        assert threads == holder.threads
    finally:
        holder.close()
        app.close()


def test_a_caller_cancelled_while_it_waits_for_the_group_creates_nothing(
    postgres_url: str,
) -> None:
    app, t = make_app(postgres_url)
    holder = Holder("postgres", postgres_url)

    async def scenario() -> None:
        held = await holder.hold(t)
        gone = asyncio.create_task(t.aenqueue(98))
        stays = asyncio.create_task(t.aenqueue(10))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        holder.release()
        await held
        await stays
        assert (await t.aenqueue(11)).args == (11,)  # the loop's connection again

    try:
        _, threads = run_counting(scenario)
        assert stored(postgres_url) == [0, 1, 2, 10, 11]
        assert threads == holder.threads
    finally:
        holder.close()
        app.close()
