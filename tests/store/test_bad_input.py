"""Bad input is refused at the call, says what to fix, and writes nothing (invariant 7)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

import due


@pytest.fixture
def send(app: due.App) -> due.Task:
    @app.task(name="emails.send_reset")
    def send_reset(user_id: int, template: str = "reset") -> None: ...

    return send_reset


def rejected(app: due.App, call: Callable[[], Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()
    assert app.jobs() == [], "a rejected enqueue must write nothing"


def test_unknown_task_name_suggests_the_closest(app: due.App, send: due.Task) -> None:
    rejected(
        app,
        lambda: app.enqueue("emails.send_rest", args=[1]),
        due.UnknownTaskError,
        "no task named 'emails.send_rest'.*did you mean 'emails.send_reset'",
    )


def test_arguments_must_fit_the_signature(app: due.App, send: due.Task) -> None:
    rejected(app, send.enqueue, due.ArgumentsError, "missing a required argument: 'user_id'")
    rejected(app, lambda: send.enqueue(1, colour="red"), due.ArgumentsError, "colour")
    rejected(app, lambda: app.enqueue("emails.send_reset", args=[1, 2, 3]), TypeError, "too many")


def test_unserialisable_arguments_are_named(app: due.App, send: due.Task) -> None:
    rejected(
        app,
        lambda: send.enqueue(object()),
        due.PayloadError,
        "argument 0 of task 'emails.send_reset' is not JSON-serialisable",
    )
    rejected(
        app,
        lambda: send.enqueue(1, template={1, 2}),
        due.PayloadError,
        "argument 'template'.*not JSON-serialisable",
    )
    rejected(app, lambda: send.enqueue(float("nan")), due.PayloadError, "argument 0")
    circular: list[Any] = [1]
    circular.append(circular)
    rejected(
        app,
        lambda: send.enqueue(1, template=circular),
        due.PayloadError,
        "argument 'template'.*Circular reference",
    )


def test_a_nul_character_in_the_arguments_is_refused_and_its_spelling_as_text_is_not(
    app: due.App, send: due.Task
) -> None:
    rejected(app, lambda: send.enqueue(1, template="a\x00b"), due.PayloadError, "NUL character")
    job = send.enqueue(1, template="a\\u0000b")  # a backslash, then "u0000": text
    assert app.get(job.id).kwargs == {"template": "a\\u0000b"}


def test_payload_over_the_limit(backend_url: str) -> None:
    app = due.App(backend_url, max_payload_bytes=1000)
    app.migrate()

    @app.task(name="big")
    def big(data: str) -> None: ...

    try:
        big.enqueue("x" * 900)
        rejected_count = len(app.jobs())
        with pytest.raises(
            due.PayloadError, match=r"over the limit of 1000 bytes.*max_payload_bytes"
        ):
            big.enqueue("x" * 1000)
        assert len(app.jobs()) == rejected_count == 1
    finally:
        app.close()


def test_default_payload_limit_is_one_mebibyte(app: due.App, send: due.Task) -> None:
    rejected(
        app,
        lambda: send.enqueue(1, template="é" * (600 * 1024)),
        due.PayloadError,
        r"1\.2 MiB as JSON, over the limit of 1\.0 MiB",
    )


@pytest.mark.parametrize(
    ("queue", "match"),
    [
        ("", "non-empty"),
        ("q" * 101, "the limit is 100"),
        ("has space", "only letters"),
        ("a=b", "only letters"),
        ("x'; drop table due_jobs", "only letters"),
    ],
)
def test_bad_queue_names(app: due.App, send: due.Task, queue: str, match: str) -> None:
    rejected(app, lambda: send.options(queue=queue).enqueue(1), due.InvalidJobError, match)


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("", "non-empty"),
        ("k" * 256, "limit is 255"),
        (7, "string"),
        ("due:completes:1", "due keeps for its own"),
    ],
)
def test_bad_keys(app: due.App, send: due.Task, key: Any, match: str) -> None:
    rejected(app, lambda: send.options(key=key).enqueue(1), due.InvalidJobError, match)


def test_delay_and_run_at_together(app: due.App, send: due.Task) -> None:
    when = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
    rejected(
        app,
        lambda: send.options(delay="1h", run_at=when).enqueue(1),
        due.InvalidJobError,
        "either delay= or run_at=, not both",
    )


def test_bad_times(app: due.App, send: due.Task) -> None:
    naive = dt.datetime(2031, 1, 1)  # noqa: DTZ001 - the point of the test
    rejected(
        app, lambda: send.options(run_at=naive).enqueue(1), due.InvalidJobError, "has no time zone"
    )
    rejected(app, lambda: send.options(delay="-5s").enqueue(1), due.InvalidJobError, "delay")
    rejected(
        app,
        lambda: send.options(delay="soon").enqueue(1),
        due.InvalidJobError,
        "cannot read 'soon'",
    )
    rejected(
        app, lambda: send.options(priority="high").enqueue(1), due.InvalidJobError, "whole number"
    )
    # Times Python could not read back (past the year 9999): refused before any write.
    rejected(app, lambda: send.options(delay=1e12).enqueue(1), due.InvalidJobError, "100 years")
    end_of_time = dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(-dt.timedelta(hours=5)))
    rejected(
        app, lambda: send.options(run_at=end_of_time).enqueue(1), due.InvalidJobError, "year 9998"
    )
    rejected(
        app,
        lambda: send.options(run_at=dt.datetime(9999, 1, 1, tzinfo=dt.UTC)).enqueue(1),
        due.InvalidJobError,
        "year 9998",
    )


def test_one_bad_request_rejects_the_whole_batch(app: due.App, send: due.Task) -> None:
    batch = [send.request(1), send.request(2), send.request(object())]
    rejected(app, lambda: app.enqueue_many(batch), due.PayloadError, "argument 0")


def test_a_bad_request_deep_in_a_big_batch_rejects_the_whole_batch(
    app: due.App, send: due.Task, backend: str
) -> None:
    """On PostgreSQL a big batch's jobs are prepared as their rows go out, so
    several statements of it have run when the bad request is met: its
    transaction is rolled back, and the error is the one the request earns.
    On SQLite every request is prepared before the write lock is taken (its
    one writer would wait meanwhile)."""
    batch = [send.request(n) for n in range(1000)]
    batch[700] = send.request(object())
    with pytest.raises(due.PayloadError, match="argument 0") as refusal:
        app.enqueue_many(batch)
    assert app.jobs() == [], "a rejected enqueue must write nothing"
    prepared_while_sending = any(entry.name == "run_many" for entry in refusal.traceback)
    assert prepared_while_sending == (backend == "postgres")
    batch[700] = send.request(700)
    assert len(app.enqueue_many(batch)) == 1000  # and the store writes on


def test_a_bad_request_deep_in_an_async_batch_is_refused_on_the_loop(
    app: due.App, send: due.Task
) -> None:
    """`aenqueue_many` checks every request before it hands the batch to a
    thread: other coroutines may change the arguments once it awaits."""
    batch = [send.request(n) for n in range(1000)]
    batch[700] = send.request(object())
    with pytest.raises(due.PayloadError, match="argument 0") as refusal:
        asyncio.run(app.aenqueue_many(batch))
    assert not any(entry.name == "run_many" for entry in refusal.traceback)
    assert app.jobs() == []


def test_bad_input_is_refused_before_the_store_is_looked_at(backend_url: str) -> None:
    """Even with no schema yet (or no database), the error says what is wrong
    with the request: one job, or a batch on SQLite or on the caller's connection."""
    app = due.App(backend_url)  # not migrated
    send = app.task(name="send")(lambda user_id: None)
    try:
        with pytest.raises(due.PayloadError):
            send.enqueue(object())
        with pytest.raises(due.ArgumentsError):
            asyncio.run(send.aenqueue())
        if backend_url.startswith("sqlite"):
            with pytest.raises(due.PayloadError):
                app.enqueue_many([send.request(1), send.request(object())])
    finally:
        app.close()


def test_unsupported_url_scheme() -> None:
    with pytest.raises(due.ConfigurationError, match="unsupported database URL scheme 'mysql'"):
        due.App("mysql://localhost/app")
    with pytest.raises(due.ConfigurationError, match="in-memory"):
        due.App("sqlite:///:memory:")
    with pytest.raises(due.ConfigurationError, match="does not exist"):
        due.App("sqlite:////no/such/folder/due.db")


def test_bad_task_definitions() -> None:
    app = due.App("sqlite:///unused.db")
    with pytest.raises(due.ConfigurationError, match=r"lease of 1\.0s is too short"):
        app.task(lease="1s")(lambda: None)
    with pytest.raises(due.ConfigurationError, match="timeout must be positive"):
        app.task(timeout=0)(lambda: None)
    with pytest.raises(due.ConfigurationError, match="queue name"):
        app.task(queue="")(lambda: None)
    with pytest.raises(due.ConfigurationError, match="max_attempts"):
        due.Retry(max_attempts=0)

    @app.task(name="dup")
    def one() -> None: ...

    with pytest.raises(due.ConfigurationError, match="already registered"):

        @app.task(name="dup")
        def two() -> None: ...
