from __future__ import annotations

import pytest

import due
from due.task import closest_task, find_context_parameter


def handler_with_string_annotation(ctx: due.Context, n: int) -> None: ...


def test_context_parameter_found_by_annotation_under_any_name() -> None:
    def sync(job_ctx: due.Context, n: int) -> None: ...

    async def asynchronous(context: due.Context, *, n: int) -> None: ...

    def none(n: int) -> None: ...

    assert find_context_parameter(sync) == "job_ctx"
    assert find_context_parameter(asynchronous) == "context"
    assert find_context_parameter(none) is None
    assert find_context_parameter(handler_with_string_annotation) == "ctx"


def test_a_task_stays_callable_and_keeps_its_identity() -> None:
    app = due.App("sqlite:///unused.db")

    @app.task
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    assert add(2, 3) == 5
    assert add.name == f"{__name__}.test_a_task_stays_callable_and_keeps_its_identity.<locals>.add"
    assert add.__doc__ == "Adds."
    assert app.tasks.get(add.name) is add


def test_the_context_comes_first_and_is_not_a_job_argument() -> None:
    app = due.App("sqlite:///unused.db")
    ctx = due.Context(job_id=1, task="t", queue="q", attempt=1, max_attempts=1, lease_token=1)

    @app.task
    def first(context: due.Context, a: int, b: int = 0) -> None: ...

    assert first.call_arguments((1, 2), {}, ctx) == ((ctx, 1, 2), {})
    assert first.call_arguments((), {"a": 1}, ctx) == ((ctx,), {"a": 1})
    first.check_arguments((1, 2), {})  # the context is not one of the job's arguments
    with pytest.raises(due.ArgumentsError):
        first.check_arguments((ctx, 1, 2), {})


@pytest.mark.parametrize("where", ["middle", "keyword"])
def test_a_context_elsewhere_is_refused_where_the_task_is_defined(where: str) -> None:
    """Type checkers see enqueue without a first `Concatenate[Context, ...]`
    parameter only; a context elsewhere would be typed as an argument to give."""
    app = due.App("sqlite:///unused.db")

    def middle(a: int, context: due.Context, b: int = 0) -> None: ...

    def keyword(a: int, *, context: due.Context) -> None: ...

    with pytest.raises(due.ConfigurationError, match="'context' must come first"):
        app.task({"middle": middle, "keyword": keyword}[where])


def test_enqueue_options_given_as_arguments_point_to_task_options() -> None:
    app = due.App("sqlite:///unused.db")

    @app.task
    def send(user_id: int) -> None: ...

    with pytest.raises(due.ArgumentsError, match=r"task.options\(delay=...\).enqueue"):
        send.check_arguments((1,), {"delay": "1h"})


def test_a_task_name_without_its_module_is_pointed_to_the_task_it_names() -> None:
    known = ["myapp.send_welcome", "myapp.send_goodbye", "billing.send", "emails.send"]
    assert closest_task("send_welcome", known) == "did you mean 'myapp.send_welcome'?"
    assert closest_task("myapp.send_welcom", known) == "did you mean 'myapp.send_welcome'?"
    assert closest_task("send", known) == "did you mean one of 'billing.send', 'emails.send'?"
    assert closest_task("welcome", ["welcomer", "notify.emails.welcome"]) == (
        "did you mean 'notify.emails.welcome'?"  # its own name, before a spelling's neighbour
    )
    assert closest_task("invoice", known) == ""
    app = due.App("sqlite:///unused.db")

    @app.task(name="myapp.send_welcome")
    def send_welcome() -> None: ...

    with pytest.raises(due.UnknownTaskError, match=r"did you mean 'myapp\.send_welcome'\?"):
        app.enqueue("send_welcome")
