"""One job's bad values stay that job's problem (faults issue, holes 2 and 3).

A NaN or a NUL in progress, a result or an error message used to fail the
jsonb cast of a whole heartbeat or acknowledgement on PostgreSQL, and a
progress value json could not write (a Decimal) made the executor raise after
the handler had succeeded, leaving the job running forever.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import due
from due import JobState
from due.worker.settings import WorkerSettings
from due.worker.worker import Worker


async def drain_worker(worker: Worker, jobs: int) -> None:
    producer = worker.producers["default"]
    assert await producer.run_once() == jobs
    for _ in range(200):
        await asyncio.sleep(0.005)
        if not worker.running and not worker.completer.pending:
            return
        await worker.completer.run_once()
    raise AssertionError(f"jobs still held: {list(worker.running)}")


def test_bad_values_end_their_own_job_and_no_other(app: due.App) -> None:
    @app.task(name="decimal_progress")
    def decimal_progress(ctx: due.Context) -> str:
        ctx.progress(Decimal("1.5"), Decimal(3), "half")
        return "done"

    @app.task(name="nan_progress", retry=due.Retry(max_attempts=1))
    def nan_progress(ctx: due.Context) -> None:
        ctx.progress(float("nan"), 10)

    @app.task(name="nul_result")
    def nul_result() -> str:
        return "a\x00b"

    @app.task(name="nul_error", retry=due.Retry(max_attempts=1))
    def nul_error() -> None:
        raise ValueError("bad\x00byte")

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str for you")

    @app.task(name="unprintable", retry=due.Retry(max_attempts=1))
    def unprintable() -> None:
        raise Unprintable()

    @app.task(name="fine")
    def fine(n: int) -> int:
        return n

    async def scenario() -> dict[str, Any]:
        made = {
            "decimal_progress": decimal_progress.enqueue(),
            "nan_progress": nan_progress.enqueue(),
            "nul_result": nul_result.enqueue(),
            "nul_error": nul_error.enqueue(),
            "unprintable": unprintable.enqueue(),
            **{f"fine{n}": fine.enqueue(n) for n in range(5)},
        }
        worker = Worker(app, WorkerSettings.build({"default": 20}))
        await drain_worker(worker, len(made))
        return {name: app.get(job.id) for name, job in made.items()}

    ended = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert all(ended[f"fine{n}"].result == n for n in range(5))
    converted = ended["decimal_progress"]
    assert converted.state == JobState.SUCCEEDED and converted.result == "done"
    assert converted.progress == {"done": 1.5, "total": 3, "message": "half"}
    nan = ended["nan_progress"]
    assert nan.state == JobState.FAILED
    assert "progress of job" in (nan.last_error or "") and "finite number" in (nan.last_error or "")
    nul = ended["nul_result"]
    assert nul.state == JobState.SUCCEEDED and "unstorable_result" in nul.result
    bad_text = ended["nul_error"]
    assert bad_text.state == JobState.FAILED and bad_text.last_error == "ValueError: bad\\x00byte"
    assert ended["unprintable"].state == JobState.FAILED
    assert "Unprintable whose str() failed" in (ended["unprintable"].last_error or "")


def test_progress_refuses_what_is_not_a_number() -> None:
    ctx = due.Context(job_id=7, task="t", queue="q", attempt=1, max_attempts=1, lease_token=1)
    for bad in (float("inf"), "12", None, True, object()):
        try:
            ctx.progress(bad)  # type: ignore[arg-type]
        except due.PayloadError as error:
            assert "progress of job 7: done" in str(error)
        else:
            raise AssertionError(f"progress({bad!r}) was accepted")
    ctx.progress(3, 10, "a\x00b")
    assert ctx.last_progress == {"done": 3, "total": 10, "message": "a\\x00b"}


SURROGATE = b"caf\xe9".decode("utf-8", "surrogateescape")
"""A lone surrogate: how Python decodes bytes that are not UTF-8 (file names,
argv). No driver can encode it (issue 35, hole 1)."""


def test_values_no_store_can_hold_end_their_own_job_and_no_other(app: due.App) -> None:
    """A result, progress message, check= warning or error text holding a lone
    surrogate used to fail every acknowledgement of the worker for ever (and, on
    SQLite, every claim): refused or escaped where produced, for that job alone."""

    @app.task(name="surrogate_result")
    def surrogate_result() -> str:
        return SURROGATE

    @app.task(name="surrogate_progress")
    def surrogate_progress(ctx: due.Context) -> str:
        ctx.progress(1, 2, SURROGATE)
        return "done"

    @app.task(name="surrogate_warning", check=lambda result: f"odd file {SURROGATE}")
    def surrogate_warning() -> int:
        return 1

    @app.task(name="surrogate_error", retry=due.Retry(max_attempts=1))
    def surrogate_error() -> None:
        raise FileNotFoundError(f"no such file: {SURROGATE}")

    @app.task(name="surrogate_checkpoint", retry=due.Retry(max_attempts=1))
    def surrogate_checkpoint(ctx: due.Context) -> None:
        ctx.checkpoint({"file": SURROGATE})

    @app.task(name="deep_result")
    def deep_result() -> list[Any]:
        value: list[Any] = []
        for _ in range(5000):
            value = [value]
        return value

    @app.task(name="fine")
    def fine(n: int) -> int:
        return n

    async def scenario() -> dict[str, Any]:
        made = {
            "deep": deep_result.enqueue(),
            "result": surrogate_result.enqueue(),
            "progress": surrogate_progress.enqueue(),
            "warning": surrogate_warning.enqueue(),
            "error": surrogate_error.enqueue(),
            "checkpoint": surrogate_checkpoint.enqueue(),
            **{f"fine{n}": fine.enqueue(n) for n in range(5)},
        }
        worker = Worker(app, WorkerSettings.build({"default": 20}))
        await drain_worker(worker, len(made))
        return {name: app.get(job.id) for name, job in made.items()}

    ended = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert all(ended[f"fine{n}"].result == n for n in range(5))
    deep = ended["deep"]
    assert deep.state == JobState.SUCCEEDED
    assert deep.result == {"unstorable_result": "<list whose repr() failed>"}
    result = ended["result"]
    assert result.state == JobState.SUCCEEDED
    assert result.result == {"unstorable_result": repr(SURROGATE)}
    progress = ended["progress"]
    assert progress.state == JobState.SUCCEEDED and progress.result == "done"
    assert progress.progress == {"done": 1, "total": 2, "message": "caf\\udce9"}
    warned = ended["warning"]
    assert warned.state == JobState.SUCCEEDED and warned.warning == "odd file caf\\udce9"
    failed = ended["error"]
    assert failed.state == JobState.FAILED
    assert failed.last_error == "FileNotFoundError: no such file: caf\\udce9"
    checkpoint = ended["checkpoint"]
    assert checkpoint.state == JobState.FAILED
    assert "lone surrogate" in (checkpoint.last_error or "")
