"""The backend contract as Django specifies it, on both stores, in process:
enqueue, get_result, validate_task, priority, run_after, signals, TaskContext,
async tasks, retries and errors, and the request's transaction."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import Client
from django.utils import timezone
from shop.models import Signup
from shop.tasks import add_async, always_fails, knows_its_context, send_welcome_email

import due
from due.contrib.django import DueBackend, DueTask, due_app
from due.contrib.django import task as due_task
from due.testing import drain
from tests.helpers.waiting import wait_until


def run_until_finished(app: due.App, task: Any, result_id: str) -> Any:
    """Run the database's jobs in this process (a worker's executor) until the
    result has finished (a retry waits out its backoff)."""

    def finished() -> Any:
        drain(app)
        found = task.get_result(result_id)
        return found if found.is_finished else None

    return wait_until(finished, timeout=30, what=f"task result {result_id} to finish")


def args_of_jobs(database: str) -> set[tuple[Any, ...]]:
    """The arguments of every welcome email job in the database."""
    jobs = due_app(database).jobs(task="shop.tasks.send_welcome_email", limit=10_000)
    return {job.args for job in jobs}


class Received:
    """Django's task signals as they arrive."""

    def __init__(self) -> None:
        self.signals: list[tuple[str, str, TaskResultStatus]] = []

    def __enter__(self) -> Received:
        for signal in (task_enqueued, task_started, task_finished):
            signal.connect(self.receive, dispatch_uid=f"test-{id(signal)}")
        return self

    def __exit__(self, *exc: object) -> None:
        for signal in (task_enqueued, task_started, task_finished):
            signal.disconnect(dispatch_uid=f"test-{id(signal)}")

    def receive(self, sender: type, task_result: Any, signal: Any, **kwargs: Any) -> None:
        name = {task_enqueued: "enqueued", task_started: "started", task_finished: "finished"}
        assert sender is DueBackend
        self.signals.append((name[signal], task_result.id, task_result.status))

    def of(self, result_id: str) -> list[tuple[str, str, TaskResultStatus]]:
        """The signals about one result (a drain runs the database's other jobs too)."""
        return [signal for signal in self.signals if signal[1] == result_id]


def test_the_backend_supports_all_of_django_s_contract() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, DueBackend)
    assert default_task_backend.supports_defer
    assert backend.supports_async_task
    assert backend.supports_get_result
    assert backend.supports_priority
    assert backend.task_class is DueTask
    assert isinstance(send_welcome_email, DueTask)


def test_enqueue_makes_a_ready_job_that_get_result_reads_back(database: str, app: due.App) -> None:
    task = send_welcome_email.using(backend=database)
    with Received() as received:
        result = task.enqueue("ready@example.com")
    assert result.status == TaskResultStatus.READY
    assert result.backend == database
    assert result.args == ["ready@example.com"] and result.kwargs == {}
    assert result.enqueued_at is not None and result.started_at is None
    assert received.signals == [("enqueued", result.id, TaskResultStatus.READY)]
    job = app.get(int(result.id))
    assert (job.task, job.queue, job.args) == (
        "shop.tasks.send_welcome_email",
        "emails",
        ("ready@example.com",),
    )
    again = task.get_result(result.id)
    assert (again.id, again.status, again.enqueued_at) == (
        result.id,
        TaskResultStatus.READY,
        result.enqueued_at,
    )
    assert again.task.backend == database
    with pytest.raises(ValueError, match="not finished"):
        _ = again.return_value


def test_an_unknown_result_id_does_not_exist(database: str) -> None:
    task = send_welcome_email.using(backend=database)
    for unknown in ("999999999", "not-a-number", "-1", "١٢"):
        with pytest.raises(TaskResultDoesNotExist):
            task.get_result(unknown)


def test_priority_and_run_after_reach_the_job(database: str, app: due.App) -> None:
    later = timezone.now() + timedelta(hours=2)
    result = send_welcome_email.using(backend=database, priority=-100, run_after=later).enqueue(
        "later@example.com"
    )
    job = app.get(int(result.id))
    assert job.priority == -100
    assert abs((job.run_at - later).total_seconds()) < 0.01
    assert drain(app, queues=["emails"]).succeeded.count(job.id) == 0  # not due yet
    app.cancel(job.id)


def test_priority_orders_the_claims(database: str, app: due.App) -> None:
    task = send_welcome_email.using(backend=database)
    low = task.using(priority=-5).enqueue("low@example.com")
    high = task.using(priority=50).enqueue("high@example.com")
    ran = drain(app, queues=["emails"]).succeeded
    assert ran.index(int(high.id)) < ran.index(int(low.id))


def test_validate_task_refuses_what_django_says_it_must() -> None:
    with pytest.raises(InvalidTask, match="priority"):
        send_welcome_email.using(priority=101)
    with pytest.raises(InvalidTask, match="Queue 'bulk' is not valid"):
        send_welcome_email.using(queue_name="bulk")

    def inner(x: int) -> int:
        return x

    with pytest.raises(InvalidTask, match="module level"):
        DueTask(func=inner, priority=0, backend="default", queue_name="default", run_after=None)
    with pytest.raises(InvalidTask, match="aware"):
        send_welcome_email.using(run_after=datetime(2030, 1, 1))  # noqa: DTZ001


def test_django_s_task_decorator_takes_due_s_options_from_django_6_1() -> None:
    import django
    from django.tasks import task
    from shop import tasks

    if django.VERSION >= (6, 1):
        made = task(tasks.not_a_task_yet, timeout="30s")
        assert isinstance(made, DueTask) and made.timeout == "30s"
        assert due_app().tasks.get(made.module_path).config.timeout == 30.0
    else:  # Django 6.0 refuses them; due's own decorator takes them
        with pytest.raises(TypeError):
            task(queue_name="default", timeout="30s")(tasks.not_a_task_yet)
        made = due_task(tasks.not_a_task_yet, timeout="30s")
        assert due_app().tasks.get(made.module_path).config.timeout == 30.0


def test_a_bad_due_option_is_refused_as_an_invalid_task() -> None:
    from shop import tasks

    with pytest.raises(InvalidTask, match="timeout"):
        due_task(tasks.not_a_task_too, timeout="-5s")
    with pytest.raises(InvalidTask, match="one set of options"):
        due_task(tasks.tidy_up.func, timeout="5s")  # declared before without one


def test_a_due_option_given_to_another_backend_s_task_is_a_clear_error() -> None:
    from shop import tasks

    with pytest.raises(TypeError, match="not due's"):
        due_task(tasks.not_a_task_too, backend="immediate", retry=due.Retry(max_attempts=1))


def test_a_task_runs_with_django_s_signals_and_returns_its_value(
    database: str, app: due.App
) -> None:
    task = send_welcome_email.using(backend=database)
    with Received() as received:
        result = task.enqueue("runs@example.com")
        done = run_until_finished(app, task, result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value["sent_to"] == "runs@example.com"
    assert done.started_at is not None and done.finished_at is not None
    assert done.worker_ids == ["due.testing.drain"] and done.attempts == 1
    assert done.errors == []
    assert received.of(result.id) == [
        ("enqueued", result.id, TaskResultStatus.READY),
        ("started", result.id, TaskResultStatus.RUNNING),
        ("finished", result.id, TaskResultStatus.SUCCESSFUL),
    ]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_a_failing_task_is_failed_after_its_retries_with_every_error(
    database: str, app: due.App
) -> None:
    task = always_fails.using(backend=database)
    with Received() as received:
        result = task.enqueue("boom")
        done = run_until_finished(app, task, result.id)
    assert done.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in done.errors] == ["builtins.ValueError"] * 2
    assert all("ValueError: boom" in e.traceback for e in done.errors)
    assert done.errors[0].exception_class is ValueError
    assert done.worker_ids == ["due.testing.drain"] * 2 and done.attempts == 2
    with pytest.raises(ValueError, match="failed"):
        _ = done.return_value
    # started twice, finished once: the first failure was retried, not finished
    assert [name for name, _, _ in received.of(result.id)] == [
        "enqueued",
        "started",
        "started",
        "finished",
    ]
    assert received.of(result.id)[-1][2] == TaskResultStatus.FAILED


def test_a_result_json_cannot_hold_fails_the_task_without_running_it_again(
    database: str, app: due.App
) -> None:
    from shop.tasks import returns_a_set

    task = returns_a_set.using(backend=database)
    result = task.enqueue()
    done = run_until_finished(app, task, result.id)
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 1  # its work is done: not retried
    (error,) = done.errors
    assert error.exception_class_path == "due.contrib.django.running.ResultNotJSON"
    assert "returned set, which JSON cannot hold" in error.traceback


def test_a_signal_receiver_that_raises_does_not_fail_a_done_task(
    database: str, app: due.App, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(sender: type, task_result: Any, **kwargs: Any) -> None:
        raise RuntimeError("a broken receiver")

    task = send_welcome_email.using(backend=database)
    task_finished.connect(broken, dispatch_uid="broken")
    try:
        result = task.enqueue("receiver@example.com")
        done = run_until_finished(app, task, result.id)
    finally:
        task_finished.disconnect(dispatch_uid="broken")
    assert done.status == TaskResultStatus.SUCCESSFUL and done.attempts == 1
    assert "a receiver of a task signal raised" in caplog.text


def test_a_cancelled_job_reads_as_failed(database: str, app: due.App) -> None:
    task = send_welcome_email.using(backend=database)
    result = task.enqueue("cancelled@example.com")
    app.cancel(int(result.id))
    assert task.get_result(result.id).status == TaskResultStatus.FAILED


def test_a_task_that_takes_context_gets_django_s_task_context(database: str, app: due.App) -> None:
    task = knows_its_context.using(backend=database)
    result = task.enqueue("hello")
    done = run_until_finished(app, task, result.id)
    assert done.return_value == {
        "word": "hello",
        "attempt": 1,
        "id": result.id,
        "backend": database,  # the backend it was sent to, whatever the task's own
    }


def test_an_async_task_runs_and_aenqueue_and_aget_result_work(database: str, app: due.App) -> None:
    task = add_async.using(backend=database)

    async def enqueue() -> Any:
        return await task.aenqueue(2, 3)

    result = asyncio.run(enqueue())
    assert app.get(int(result.id)).priority == 10
    run_until_finished(app, task, result.id)

    async def read() -> Any:
        return await task.aget_result(result.id)

    assert asyncio.run(read()).return_value == 5


def test_a_wrong_call_is_refused_at_enqueue(database: str) -> None:
    with pytest.raises(due.ArgumentsError):
        send_welcome_email.using(backend=database).enqueue("a@example.com", "extra")


def test_a_key_deduplicates(database: str) -> None:
    task = send_welcome_email.using(backend=database)
    first = task.using(key="welcome:dedupe").enqueue("dedupe@example.com")
    second = task.using(key="welcome:dedupe").enqueue("dedupe@example.com")
    assert first.id == second.id
    assert second.args == ["dedupe@example.com"]


def test_a_job_enqueued_in_a_transaction_that_rolls_back_does_not_exist(database: str) -> None:
    task = send_welcome_email.using(backend=database)
    with Received() as received:
        with pytest.raises(RuntimeError), transaction.atomic(using=database):
            task.enqueue("lost@example.com")
            raise RuntimeError("the view failed")
        with transaction.atomic(using=database):
            committed = task.enqueue("committed@example.com")
            assert received.signals == []  # task_enqueued waits for the commit
    assert received.signals == [("enqueued", committed.id, TaskResultStatus.READY)]
    # (On SQLite the rolled-back job's id is free again: the committed one may have it.)
    assert task.get_result(committed.id).args == ["committed@example.com"]
    assert ("lost@example.com",) not in args_of_jobs(database)
    with transaction.atomic(using=database):
        kept = task.enqueue("kept@example.com")
        with pytest.raises(RuntimeError), transaction.atomic(using=database):  # a savepoint
            task.enqueue("inner@example.com")
            raise RuntimeError
    assert task.get_result(kept.id).status == TaskResultStatus.READY
    assert ("inner@example.com",) not in args_of_jobs(database)


def test_a_job_in_a_transaction_is_written_on_django_s_connection(
    database: str, app: due.App
) -> None:
    """Inside atomic() the job is part of Django's transaction: another
    connection does not see it until the commit."""
    task = send_welcome_email.using(backend=database)
    with transaction.atomic(using=database):
        result = task.enqueue("unseen@example.com")
        assert connections[database].in_atomic_block
        with pytest.raises(due.JobNotFoundError):
            app.get(int(result.id))  # due's own connection: not committed yet
    assert app.get(int(result.id)).args == ("unseen@example.com",)


def test_inside_the_transaction_get_result_sees_its_own_job(database: str, app: due.App) -> None:
    task = always_fails.using(backend=database)
    done = task.enqueue("read your writes")
    run_until_finished(app, task, done.id)  # a job with errors and a worker per attempt
    with transaction.atomic(using=database):
        result = task.enqueue("mine")
        seen = task.get_result(result.id)
        assert (seen.id, seen.status, seen.args) == (result.id, TaskResultStatus.READY, ["mine"])
        assert seen.enqueued_at == result.enqueued_at and seen.enqueued_at.tzinfo is not None
        old = task.get_result(done.id)  # read on Django's connection, as due's own reads it
        assert old.status == TaskResultStatus.FAILED
        assert [e.exception_class_path for e in old.errors] == ["builtins.ValueError"] * 2
        assert old.finished_at is not None and old.finished_at.tzinfo is not None
    assert task.get_result(done.id).errors == old.errors


def test_with_autocommit_off_the_job_is_the_caller_s_transaction_s(
    database: str, app: due.App
) -> None:
    task = send_welcome_email.using(backend=database)
    transaction.set_autocommit(False, using=database)
    try:
        task.enqueue("manual-rollback@example.com")
        transaction.rollback(using=database)
        committed = task.enqueue("manual-commit@example.com")
        transaction.commit(using=database)
    finally:
        transaction.set_autocommit(True, using=database)
    assert ("manual-rollback@example.com",) not in args_of_jobs(database)
    assert app.get(int(committed.id)).args == ("manual-commit@example.com",)


@pytest.mark.parametrize("fail", [True, False], ids=["raises", "commits"])
def test_a_view_that_enqueues_then_raises_leaves_no_job(
    database: str, app: due.App, fail: bool
) -> None:
    email = f"view-{database}-{fail}@example.com"
    before = {job.id for job in app.jobs(task="shop.tasks.send_welcome_email", limit=1000)}
    response = Client().post(f"/signup/{database}/", {"email": email, "fail": "1" if fail else ""})
    after = app.jobs(task="shop.tasks.send_welcome_email", limit=1000)
    new = [job for job in after if job.id not in before]
    exists = Signup.objects.using(database).filter(email=email).exists()
    if fail:
        assert response.status_code == 500
        assert new == [] and not exists
    else:
        assert response.status_code == 200
        assert [job.args for job in new] == [(email,)] and exists
        assert response.json()["id"] == str(new[0].id)


def test_an_async_view_enqueues(database: str, app: due.App) -> None:
    response = Client().post(f"/signup-async/{database}/", {"email": "async@example.com"})
    assert response.status_code == 200
    assert app.get(int(response.json()["id"])).args == ("async@example.com",)


def test_due_app_gives_the_backend_s_app(database: str) -> None:
    assert due_app(database) is task_backends[database].app


def test_get_result_gives_the_task_as_it_was_sent(database: str, app: due.App) -> None:
    """What `.using()` changed for one job comes back with its result, as
    Django's DummyBackend keeps it: the result read back equals the one enqueued."""
    later = timezone.now() + timedelta(hours=1)
    task = send_welcome_email.using(
        backend=database, priority=7, queue_name="default", run_after=later
    ).using(key=f"sent-as-{database}")
    result = task.enqueue("sent-as@example.com")
    again = task.get_result(result.id)
    assert (again.task.priority, again.task.queue_name, again.task.run_after) == (
        7,
        "default",
        later,
    )
    assert again.task.key == f"sent-as-{database}"
    assert again == result
    app.cancel(int(result.id))
    # One whose run_after has passed runs, and keeps it.
    earlier = timezone.now() - timedelta(minutes=1)
    task = send_welcome_email.using(backend=database, run_after=earlier)
    done = run_until_finished(app, task, task.enqueue("ran@example.com").id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.task.run_after == earlier


def test_started_at_is_the_first_attempt_s_start(database: str, app: due.App) -> None:
    """Django: started_at is when the first attempt began, last_attempted_at
    the latest; the task's own TaskContext says the same."""
    from shop.tasks import fails_once

    task = fails_once.using(backend=database)
    done = run_until_finished(app, task, task.enqueue().id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.attempts == 2
    job = app.get(int(done.id))
    first_failure = job.errors[0].at
    assert done.started_at < first_failure < done.last_attempted_at
    assert done.last_attempted_at == job.started_at
    told = done.return_value
    assert datetime.fromisoformat(told["started_at"]) == done.started_at
    assert datetime.fromisoformat(told["last"]) > first_failure


def test_arguments_are_taken_as_django_s_backends_take_them(database: str, app: due.App) -> None:
    from types import MappingProxyType

    from shop.tasks import echoes

    task = echoes.using(backend=database)
    result = task.enqueue(b"caf\xc3\xa9", range(3), MappingProxyType({"a": (1, 2)}), when=b"now")
    assert result.args == ["café", [0, 1, 2], {"a": [1, 2]}]
    assert result.kwargs == {"when": "now"}
    done = run_until_finished(app, task, result.id)
    assert done.return_value == {"args": result.args, "kwargs": {"when": "now"}}


def test_an_argument_django_cannot_take_is_a_type_error_and_nothing_is_sent(
    database: str, app: due.App
) -> None:
    from shop.tasks import echoes

    task = echoes.using(backend=database)
    before = len(app.jobs(task="shop.tasks.echoes", limit=10_000))
    with Received() as received:
        for wrong in ([1, timezone.now()], [1, {2, 3}], [1, b"\xff"]):
            with pytest.raises(
                TypeError, match=r"argument 1 of task 'shop\.tasks\.echoes'"
            ) as raised:
                task.enqueue(*wrong)
            assert isinstance(raised.value, due.PayloadError)
        with pytest.raises(TypeError, match=r"argument 'at'.*Unsupported type"):
            asyncio.run(task.aenqueue(at=timezone.now()))
    assert received.signals == []
    assert len(app.jobs(task="shop.tasks.echoes", limit=10_000)) == before


def test_a_failure_s_secrets_reach_no_receiver_nor_django_s_log(
    database: str, app: due.App, caplog: pytest.LogCaptureFixture
) -> None:
    """Django's own receiver of task_finished logs the exception being handled:
    the signal is sent outside it, and its TaskError is scrubbed as due's is."""
    from shop.tasks import signs_in

    tracebacks: dict[str, list[str]] = {}  # by result: a drain runs the database's other jobs too

    def receiver(sender: type, task_result: Any, **kwargs: Any) -> None:
        tracebacks[task_result.id] = [error.traceback for error in task_result.errors]

    task = signs_in.using(backend=database)
    caplog.set_level(logging.DEBUG)
    task_finished.connect(receiver, dispatch_uid="secrets")
    try:
        done = run_until_finished(app, task, task.enqueue("alice", "hunter2-staple").id)
    finally:
        task_finished.disconnect(dispatch_uid="secrets")
    assert done.status == TaskResultStatus.FAILED
    (told,) = tracebacks[done.id]
    assert "partner refused login alice:•••" in told
    assert "partner refused login alice:•••" in done.errors[0].traceback
    assert any(
        record.name == "django.tasks" and record.levelno == logging.ERROR
        for record in caplog.records
    )
    assert "hunter2" not in caplog.text
    assert "hunter2" not in told


def test_a_task_that_exits_fails_with_django_s_signals(database: str, app: due.App) -> None:
    """sys.exit() in a task fails it, as Django's backends fail it (and it is
    not retried: due retries exceptions, not exits, unless told)."""
    from shop.tasks import exits

    task = exits.using(backend=database)
    with Received() as received:
        result = task.enqueue(3)
        done = run_until_finished(app, task, result.id)
    assert done.status == TaskResultStatus.FAILED and done.attempts == 1
    assert done.errors[0].exception_class is SystemExit
    assert [name for name, _, _ in received.of(result.id)] == ["enqueued", "started", "finished"]
    assert received.of(result.id)[-1][2] == TaskResultStatus.FAILED
