"""A user's module, as a type checker sees it: every call here must pass
`mypy --strict` (make check, and tests/acceptance/test_typing.py, which also
checks that wrong calls fail)."""

from __future__ import annotations

import due

app = due.App("sqlite:///typing.db")


@app.task(queue="emails", retry=due.Retry(max_attempts=5))
def send_reset_email(user_id: int) -> None: ...


@app.task
async def build_report(ctx: due.Context, month: str, *, final: bool = False) -> dict[str, int]:
    ctx.progress(1, 2)
    return {month: 1}


@app.task(queue="bulk")
def resize(ctx: due.Context, image_id: int, width: int = 800) -> str:
    return f"{image_id}@{width}"


def enqueue_them() -> list[due.Job]:
    return [
        send_reset_email.enqueue(42),
        send_reset_email.options(delay="24h", key="reset:42").enqueue(42),
        build_report.enqueue("2026-11", final=True),
        resize.enqueue(7),
        resize.options(queue="urgent", priority=10).enqueue(7, width=200),
        *app.enqueue_many([resize.request(n) for n in range(3)]),
        *app.enqueue_many([resize.options(key="r:1").request(1, width=10)]),
        app.enqueue("usage.resize", args=[8]),
    ]


async def enqueue_async() -> due.Job:
    await build_report.aenqueue("2026-12")
    return await send_reset_email.options(run_at=None).aenqueue(1)


def still_a_function() -> int:
    send_reset_email(1)  # calling the task runs the function here and now
    return len(
        resize(
            due.Context(job_id=1, task="t", queue="q", attempt=1, max_attempts=1, lease_token=1), 1
        )
    )
