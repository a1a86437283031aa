from __future__ import annotations

import due
from due.task import find_context_parameter


def handler_with_string_annotation(ctx: due.Context, n: int) -> None: ...


def test_context_parameter_found_by_annotation_under_any_name() -> None:
    def sync(job_ctx: due.Context, n: int) -> None: ...

    async def asynchronous(n: int, *, context: due.Context) -> None: ...

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


def test_the_context_takes_its_own_place_among_the_arguments() -> None:
    app = due.App("sqlite:///unused.db")
    ctx = due.Context(job_id=1, task="t", queue="q", attempt=1, max_attempts=1, lease_token=1)

    @app.task
    def first(context: due.Context, a: int, b: int = 0) -> None: ...

    @app.task
    def middle(a: int, context: due.Context, b: int = 0) -> None: ...

    @app.task
    def keyword(a: int, *, context: due.Context) -> None: ...

    assert first.call_arguments((1, 2), {}, ctx) == ((ctx, 1, 2), {})
    assert first.call_arguments((), {"a": 1}, ctx) == ((), {"a": 1, "context": ctx})
    assert middle.call_arguments((1, 2), {}, ctx) == ((1, ctx, 2), {})
    assert middle.call_arguments((1,), {}, ctx) == ((1,), {"context": ctx})
    assert keyword.call_arguments((1,), {}, ctx) == ((1,), {"context": ctx})
    first.check_arguments((1, 2), {})  # the context is not one of the job's arguments
