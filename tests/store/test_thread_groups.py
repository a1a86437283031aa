"""One-job enqueues made side by side by threads: those that come while
another thread's enqueue is written wait for it, and are written together
next (store/thread_groups.py), each caller given its own job.

The crowd is made certain rather than likely: another session holds a lock,
so the first thread's write waits (it has taken its group) while the others
enqueue and join the line; then the lock goes."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence

import pytest

import due
from due.errors import StoreError
from tests.helpers.handles import assert_each_handle_is_its_row
from tests.helpers.waiting import wait_until
from tests.helpers.write_lock import WriteLock
from tests.store.test_enqueue_groups import BAD_ROW, stored_args
from tests.store.test_loop_connections import make_app

CROWD = 30


class Outcome:
    """What one thread's call gave."""

    def __init__(self, call: Callable[[], due.Job]) -> None:
        self.value: due.Job | BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,))

    def _run(self, call: Callable[[], due.Job]) -> None:
        try:
            self.value = call()
        except BaseException as error:  # the test reads it
            self.value = error


Scene = tuple[due.App, due.Task[..., None], WriteLock]


@pytest.fixture
def grouped(backend: str, backend_url: str) -> Iterator[Scene]:
    app, t = make_app(backend_url)
    t.enqueue(-1)  # the store's schema checked and its connections open
    lock = WriteLock(backend, backend_url)
    try:
        yield app, t, lock
    finally:
        lock.close()
        app.close()


def crowd_behind_a_held_write(
    app: due.App, t: due.Task[..., None], lock: WriteLock, calls: list[Callable[[], due.Job]]
) -> tuple[Outcome, list[Outcome]]:
    """The lock taken, the first thread's enqueue (of 0) written alone and
    waiting for it, and each call of the crowd in line behind it."""
    groups = app.store._thread_groups
    lock.take()
    first = Outcome(lambda: t.enqueue(0))
    first.thread.start()
    wait_until(lambda: groups.being_written == 1, what="the first write to take its group")
    crowd = [Outcome(call) for call in calls]
    for outcome in crowd:
        outcome.thread.start()
    wait_until(lambda: groups.in_line == 1 + len(calls), what="the crowd to join the line")
    return first, crowd


def ended(outcomes: Sequence[Outcome]) -> list[due.Job | BaseException | None]:
    for outcome in outcomes:
        outcome.thread.join(timeout=60)
        assert not outcome.thread.is_alive()
    return [outcome.value for outcome in outcomes]


def behind_a_held_write(
    app: due.App, t: due.Task[..., None], lock: WriteLock, calls: list[Callable[[], due.Job]]
) -> tuple[due.Job, list[due.Job | BaseException | None]]:
    """The first thread's job, written alone while the lock was held, and what
    each call of the crowd that came meanwhile gave."""
    first, crowd = crowd_behind_a_held_write(app, t, lock, calls)
    lock.release()
    first_job, *outcomes = ended([first, *crowd])
    assert isinstance(first_job, due.Job), first_job
    return first_job, outcomes


def test_enqueues_that_wait_for_another_threads_write_are_written_in_one_after_it(
    grouped: Scene,
) -> None:
    app, t, lock = grouped
    numbers = range(10, 10 + CROWD)
    calls = [
        (lambda n=n: t.options(delay=60 if n % 2 else 0).enqueue(n))  # type: ignore[misc]
        for n in numbers
    ]
    first, crowd = behind_a_held_write(app, t, lock, calls)
    jobs = [job for job in crowd if isinstance(job, due.Job)]
    assert [job.args for job in jobs] == [(n,) for n in numbers], crowd
    assert stored_args(app) == [-1, 0, *numbers]
    assert len({job.created_at for job in jobs}) == 1, "one transaction for the crowd"
    assert first.created_at != jobs[0].created_at, "the first wrote its job alone"
    assert_each_handle_is_its_row(app, jobs)
    assert app.store._thread_groups.in_line == 0


@pytest.mark.parametrize(("bad", "says"), [("refused", "no_refused"), ("skipped", "did not store")])
def test_a_bad_row_in_a_group_of_threads_fails_only_its_own_caller(
    grouped: Scene, backend: str, bad: str, says: str
) -> None:
    app, t, lock = grouped
    bad_task = app.task(name=bad)(lambda n: None)
    lock.run(BAD_ROW[bad][backend])
    calls: list[Callable[[], due.Job]] = [(lambda n=n: t.enqueue(n)) for n in range(10, 15)]  # type: ignore[misc]
    calls.insert(2, lambda: bad_task.enqueue(99))
    _, outcomes = behind_a_held_write(app, t, lock, calls)
    error = outcomes.pop(2)
    assert isinstance(error, StoreError) and says in str(error), error
    assert [job.args for job in outcomes if isinstance(job, due.Job)] == [
        (n,) for n in range(10, 15)
    ], outcomes
    assert stored_args(app) == [-1, 0, *range(10, 15)]


def test_an_outage_met_by_the_group_goes_to_each_of_its_callers(
    grouped: Scene, backend: str
) -> None:
    """An error that is not a refusal (here: the database's table gone while the
    crowd waited) reaches every caller of the group, none left waiting."""
    app, t, lock = grouped
    calls: list[Callable[[], due.Job]] = [(lambda n=n: t.enqueue(n)) for n in range(10, 15)]  # type: ignore[misc]
    first, crowd = crowd_behind_a_held_write(app, t, lock, calls)
    lock.run("DROP TABLE due_jobs" + (" CASCADE" if backend == "postgres" else ""))
    lock.commit()
    outcomes = ended([first, *crowd])
    for outcome in outcomes:
        assert isinstance(outcome, StoreError), outcome
    assert app.store._thread_groups.in_line == 0
    # The crowd's one error, as an object of each caller's own: raised in
    # several threads, one object's traceback is spliced from all of theirs.
    assert len({str(outcome) for outcome in outcomes[1:]}) == 1
    assert len({id(outcome) for outcome in outcomes}) == len(outcomes)


def test_a_process_forked_while_threads_are_in_line_enqueues_without_waiting_for_them(
    grouped: Scene, backend: str
) -> None:
    app, t, lock = grouped
    groups = app.store._thread_groups
    first, behind = crowd_behind_a_held_write(app, t, lock, [lambda: t.enqueue(1)])
    child = os.fork()
    if child == 0:  # the child: none of the parent's threads, an empty line
        code = 0 if (groups.in_line, groups.being_written) == (0, 0) else 1
        os._exit(code)
    _, status = os.waitpid(child, 0)
    lock.release()
    assert all(isinstance(outcome, due.Job) for outcome in ended([first, *behind]))
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_thread_inside_its_own_sqlite_write_enqueues_alone(sqlite_url: str) -> None:
    """A handler in `ctx.transaction()` holds SQLite's one writer: its enqueue
    without `connection=` is refused at once, as before grouping, instead of
    waiting in line behind a writer that waits for it."""
    app = due.App(sqlite_url, store_options={"busy_timeout": 5})
    app.migrate()
    t = app.task(name="t")(lambda n: None)
    groups = app.store._thread_groups
    try:
        with app.store.backend.handler_transaction():
            other = Outcome(lambda: t.enqueue(1))
            other.thread.start()
            wait_until(lambda: groups.being_written == 1, what="another thread's write")
            with pytest.raises(StoreError, match="within a transaction"):
                t.enqueue(2)
        other.thread.join(timeout=60)
        assert isinstance(other.value, due.Job), other.value
        assert stored_args(app) == [1]
    finally:
        app.close()


def test_threads_in_line_when_the_store_closes_are_told_and_open_nothing(
    sqlite_url: str,
) -> None:
    """The write under way ends on its connection; those waiting behind it get
    "store was closed", and no connection is opened for them on the closed
    store (it would never be closed)."""
    app, t = make_app(sqlite_url)
    t.enqueue(-1)
    store, lock = app.store, WriteLock("sqlite", sqlite_url)
    groups, backend = store._thread_groups, store.backend
    try:
        lock.take()
        first = Outcome(lambda: t.enqueue(0))
        first.thread.start()
        wait_until(lambda: backend._busy, what="the first write to wait on its connection")
        behind = [Outcome(lambda n=n: t.enqueue(n)) for n in (1, 2)]  # type: ignore[misc]
        for outcome in behind:
            outcome.thread.start()
        wait_until(lambda: groups.in_line == 3, what="the others to join the line")
        app.close()
        lock.release()
        for outcome in (first, *behind):
            outcome.thread.join(timeout=60)
        assert isinstance(first.value, due.Job), first.value
        for outcome in behind:
            assert isinstance(outcome.value, due.StoreUnavailableError), outcome.value
            assert "closed" in str(outcome.value)
        assert backend._connections == []
    finally:
        lock.close()
    assert stored_args(due.App(sqlite_url)) == [-1, 0]
