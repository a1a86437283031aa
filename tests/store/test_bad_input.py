"""Bad input is refused at the call, says what to fix, and writes nothing (invariant 7)."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
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


def test_a_schedule_added_at_run_time_is_held_to_the_apps_payload_limit(backend_url: str) -> None:
    app = due.App(backend_url, max_payload_bytes=1000)
    app.migrate()

    @app.task(name="big")
    def big(data: str) -> None: ...

    try:
        with pytest.raises(due.PayloadError, match="over the limit of 1000 bytes"):
            app.add_schedule("s", every="1h", task=big, args=["x" * 1000])
        assert app.schedules() == []
        app.add_schedule("s", every="1h", task=big, args=["x" * 900])
        assert [overview.stored.name for overview in app.schedules()] == ["s"]
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
    for url in ("sqlite://due.db", "sqlite:due.db", "SQLite:///due.db", "sqlite3:///due.db"):
        with pytest.raises(due.ConfigurationError, match=r"sqlite:///due\.db is due\.db in the"):
            due.App(url)
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


# --- bad input that escaped as a raw exception (issue 35) ------------------------

SURROGATE = b"caf\xe9".decode("utf-8", "surrogateescape")  # how Python decodes argv


def nested(depth: int) -> list[Any]:
    outer: list[Any] = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


def test_a_lone_surrogate_in_the_arguments_or_the_key_is_refused_and_named(
    app: due.App, send: due.Task
) -> None:
    """It passed the checks, then the driver raised UnicodeEncodeError."""
    surrogate = "lone surrogate.*decode such bytes"
    rejected(app, lambda: send.enqueue(SURROGATE), due.PayloadError, f"argument 0 .*{surrogate}")
    rejected(
        app,
        lambda: send.enqueue(1, template={"names": ["ok", SURROGATE]}),
        due.PayloadError,
        f"argument 'template' of task 'emails.send_reset' holds a {surrogate}",
    )
    rejected(
        app,
        lambda: app.enqueue_many([send.request(n) for n in range(500)] + [send.request(SURROGATE)]),
        due.PayloadError,
        "argument 0",
    )
    rejected(
        app,
        lambda: asyncio.run(send.aenqueue(1, template=SURROGATE)),
        due.PayloadError,
        "argument 'template'",
    )
    rejected(
        app,
        lambda: send.options(key=f"report:{SURROGATE}").enqueue(1),
        due.InvalidJobError,
        f"key 'report:caf\\\\udce9' holds a {surrogate}",
    )
    assert send.enqueue(1, template="café ✓").kwargs == {"template": "café ✓"}  # real unicode


def test_a_keyword_name_with_a_lone_surrogate_is_refused(app: due.App) -> None:
    @app.task(name="anything")
    def anything(**options: Any) -> None: ...

    rejected(app, lambda: anything.enqueue(**{SURROGATE: 1}), due.PayloadError, "keyword name 'caf")


def test_arguments_nested_too_deeply_are_refused_and_named(app: due.App, send: due.Task) -> None:
    """A RecursionError before."""
    rejected(app, lambda: send.enqueue(nested(5000)), due.PayloadError, "argument 0 .*too deeply")
    rejected(
        app,
        lambda: send.enqueue(1, template={"a": nested(5000)}),
        due.PayloadError,
        "argument 'template' of task 'emails.send_reset' is nested too deeply.*flatten",
    )
    assert send.enqueue(nested(100)).args == (nested(100),)


def test_a_nul_in_a_key_a_schedule_name_or_a_task_name_is_refused_on_both(
    app: due.App, send: due.Task
) -> None:
    """SQLite stored them, PostgreSQL raised a StoreError."""
    rejected(app, lambda: send.options(key="a\x00b").enqueue(1), due.InvalidJobError, "NUL")
    for define in (app.add_schedule, app.schedule):
        with pytest.raises(due.ConfigurationError, match=r"schedule name 'a\\x00b' holds a NUL"):
            define("a\x00b", every="1h", task=send, args=[1])
        with pytest.raises(due.ConfigurationError, match=r"schedule name .* lone surrogate"):
            define(SURROGATE, every="1h", task=send, args=[1])
    for name in ("a\x00b", SURROGATE):
        with pytest.raises(due.ConfigurationError, match=r"task name .* holds a"):
            app.task(name=name)(lambda: None)
    assert app.schedules() == [] and app.jobs(key="a\x00b") == [] == app.jobs(task=SURROGATE)


@pytest.mark.parametrize("job_id", [2**70, -(2**70), 2**63, 0])
def test_a_job_id_no_job_can_have_is_not_found_on_both(
    app: due.App, send: due.Task, job_id: int
) -> None:
    """SQLite raised OverflowError past 64 bits."""
    send.enqueue(1)
    for call in (app.get, app.cancel, app.retry, app.pause_group, lambda i: app.wait(i, timeout=1)):
        with pytest.raises(due.JobNotFoundError, match=f"no job with id {job_id}"):
            call(job_id)
    assert app.jobs(parent=job_id) == [] and app.history(job=job_id) == []
    assert len(app.jobs(before=job_id)) == (1 if job_id > 0 else 0)


def test_a_job_id_that_is_not_a_whole_number_is_refused(app: due.App) -> None:
    for bad in ("abc", 1.5, True, None):
        with pytest.raises(due.ConfigurationError, match="a job id must be a whole number"):
            app.get(bad)  # type: ignore[arg-type]
    with pytest.raises(due.JobNotFoundError, match="no job with id 12"):
        app.get("12")  # type: ignore[arg-type] # from a form or a command line: still read


def test_a_negative_or_broken_limit_is_refused_on_both(app: due.App, send: due.Task) -> None:
    """A negative limit listed every job on SQLite; PostgreSQL refused the statement."""
    send.enqueue(1)
    for bad, words in ((-1, "limit=-1 is negative"), (1.5, "whole number"), ("x", "whole number")):
        for lister in (app.jobs, app.history, functools.partial(app.schedule_runs, "nightly")):
            with pytest.raises(due.ConfigurationError, match=words):
                lister(limit=bad)
    assert len(app.jobs(limit=2**70)) == 1 and app.jobs(limit=0) == []


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        (42, None, "args= takes a list or tuple.*got int 42"),
        ("abc", None, "args= takes a list or tuple.*got str 'abc'"),
        ({"user_id": 1}, None, r"got dict .*keyword arguments go in kwargs="),
        ([1], 42, "kwargs= takes a dict.*got int 42"),
        ([1], [("template", "x")], "kwargs= takes a dict"),
        ([1], {1: "x"}, "keywords must be strings"),
    ],
)
def test_args_and_kwargs_of_the_wrong_shape_are_refused(
    app: due.App, send: due.Task, args: Any, kwargs: Any, words: str
) -> None:
    """A bare `TypeError: 'int' object is not iterable` before."""
    rejected(
        app, lambda: app.enqueue(send.name, args=args, kwargs=kwargs), due.ArgumentsError, words
    )
    request = due.JobRequest(send.name, args=args, kwargs=kwargs)
    rejected(app, lambda: app.enqueue_many([request]), due.ArgumentsError, words)


def test_a_misspelt_keyword_is_named_with_the_closest_parameter(
    app: due.App, send: due.Task
) -> None:
    """Only the missing `user_id` was named, not the `user` given in its place."""
    rejected(
        app,
        lambda: send.enqueue(user=42),
        due.ArgumentsError,
        r"missing a required argument: 'user_id'; unexpected keyword argument 'user' "
        r"\(did you mean 'user_id'\?\)",
    )
    rejected(
        app,
        lambda: send.enqueue(1, tempalte="x"),
        due.ArgumentsError,
        "unexpected keyword argument 'tempalte'; for 'tempalte', did you mean 'template'",
    )
