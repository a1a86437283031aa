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
