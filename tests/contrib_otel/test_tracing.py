"""Tracing with OpenTelemetry in one process, on both stores: the SDK's
in-memory exporter, a real store, the executor run by `due.testing.drain`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import due
from due.clock import FakeClock
from due.contrib.opentelemetry import DueInstrumentor
from due.scheduler.leader import DatabaseLeases, Leadership
from due.scheduler.service import Scheduler
from due.testing import drain
from tests.contrib_otel.conftest import Traces
from tests.helpers.database import plain_transaction, rows


def stored_payload(app: due.App, job_id: int) -> dict[str, object]:
    """The payload as the database holds it (not as `app.get` shows the arguments)."""
    ((payload,),) = rows(app.url, f"SELECT payload FROM due_jobs WHERE id = {int(job_id)}")
    return payload if isinstance(payload, dict) else json.loads(payload)


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def test_the_execution_is_a_child_of_the_enqueue_and_the_handler_of_the_execution(
    app: due.App, traces: Traces
) -> None:
    @app.task(name="greet", queue="emails")
    def greet(name: str) -> str:
        with traces.tracer.start_as_current_span("handler work"):
            return f"hello {name}"

    with traces.tracer.start_as_current_span("web request"):
        job = greet.enqueue("ada")
    assert drain(app).succeeded == [job.id]

    web, send, process = (traces.one(n) for n in ("web request", "send emails", "process emails"))
    work = traces.one("handler work")
    assert (send.kind, process.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert parent_id(send) == span_id(web)
    assert parent_id(process) == span_id(send) and process.links == ()
    assert parent_id(work) == span_id(process)
    assert len({s.context.trace_id for s in (web, send, process, work) if s.context}) == 1
    assert dict(send.attributes or {}) == {
        "messaging.system": "due",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "emails",
        "due.task": "greet",
    }
    assert dict(process.attributes or {}) == {
        "messaging.system": "due",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "emails",
        "messaging.message.id": str(job.id),
        "due.task": "greet",
        "due.job.attempt": 1,
        "due.job.outcome": "succeeded",
    }
    assert process.status.status_code is StatusCode.UNSET
    # Stored beside the arguments, exactly W3C; never shown as an argument.
    stored = stored_payload(app, job.id)
    assert stored["headers"] == {"traceparent": traceparent(send)}
    shown = app.get(job.id)
    assert (shown.args, shown.kwargs) == (("ada",), {})


def test_a_failed_attempt_records_its_error_and_each_retry_links_to_the_first(
    app: due.App, traces: Traces
) -> None:
    @app.task(name="flaky", retry=due.Retry(max_attempts=3, backoff=0))
    def flaky() -> None:
        raise ValueError("the mail server said no")

    job = flaky.enqueue()
    result = drain(app)
    assert result.failed == [job.id] and result.retried == [job.id, job.id]

    send = traces.one("send default")
    first, second, third = sorted(
        traces.named("process default"), key=lambda s: (s.attributes or {})["due.job.attempt"]
    )
    for span, outcome in ((first, "retry"), (second, "retry"), (third, "failed")):
        assert parent_id(span) == span_id(send)  # every attempt: a child of the enqueue
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "ValueError: the mail server said no"
        (raised,) = [e for e in span.events if e.name == "exception"]
        assert (raised.attributes or {})["exception.type"] == "ValueError"
        assert (span.attributes or {})["due.job.outcome"] == outcome
        assert (span.attributes or {})["error.type"] == "ValueError"
    assert first.links == ()
    for retry in (second, third):  # to the first attempt, not to the one before
        (link,) = retry.links
        assert link.context.span_id == span_id(first)
        assert link.context.trace_id == first.context.trace_id  # type: ignore[union-attr]
        assert dict(link.attributes or {}) == {"due.link": "first_attempt"}


def test_a_failed_attempt_s_span_shows_its_error_as_the_history_keeps_it(
    app: due.App, traces: Traces
) -> None:
    # The production how-to's own example: a message that repeats the
    # redacted arguments, the card by position and an API key in a dict.
    @app.task(name="charge", redact=["card_number"], retry=due.Retry(max_attempts=1))
    def charge(customer_id: int, card_number: str, details: dict[str, str]) -> None:
        raise RuntimeError(f"card {card_number} declined with key {details['api_key']}")

    card, key = "4242424242424242", "sk_live_51H8secret"
    job = charge.enqueue(42, card, {"api_key": key, "note": "first"})
    drain(app)

    stored = app.get(job.id)
    assert stored.last_error == "RuntimeError: card ••• declined with key •••"
    process = traces.one("process default")
    (raised,) = [e for e in process.events if e.name == "exception"]
    event = dict(raised.attributes or {})
    assert process.status.description == stored.last_error
    assert event["exception.type"] == "RuntimeError"
    assert event["exception.message"] == "card ••• declined with key •••"
    assert event["exception.stacktrace"] == stored.errors[-1].traceback
    exported = json.dumps([span.to_json() for span in traces.exporter.get_finished_spans()])
    assert card not in exported and key not in exported


def test_an_attempt_that_lost_its_lease_records_it(app: due.App, traces: Traces) -> None:
    @app.task(name="overtaken")
    def overtaken(ctx: due.Context) -> None:
        ctx.lease_token -= 1  # (as if another attempt had taken the job over)
        ctx.checkpoint(1)  # raises LeaseLost, which stops the attempt

    overtaken.enqueue()
    drain(app)
    process = traces.one("process default")
    attributes = dict(process.attributes or {})
    assert (attributes["due.job.outcome"], attributes["error.type"]) == ("lease_lost", "LeaseLost")
    assert process.status.status_code is StatusCode.ERROR


def test_a_success_written_in_the_handler_s_transaction_is_a_success(
    app: due.App, traces: Traces
) -> None:
    @app.task(name="in_transaction")
    def in_transaction(ctx: due.Context) -> None:
        with plain_transaction(app.url) as conn, ctx.transaction(conn):
            conn.execute("SELECT 1")

    job = in_transaction.enqueue()
    drain(app)
    assert app.get(job.id).state is due.JobState.SUCCEEDED
    process = traces.one("process default")
    assert (process.attributes or {})["due.job.outcome"] == "succeeded"
    assert "error.type" not in (process.attributes or {})
    assert process.status.status_code is StatusCode.UNSET


def test_a_schedule_run_is_a_trace_of_its_own_linked_to_where_it_was_made(
    app: due.App, traces: Traces
) -> None:
    @app.task(name="nightly")
    def nightly() -> None:
        with traces.tracer.start_as_current_span("billing"):
            pass

    app.add_schedule("billing", cron="0 2 * * *", task=nightly)
    with traces.tracer.start_as_current_span("admin click"):
        job = app.trigger_schedule("billing")
    assert drain(app).succeeded == [job.id]

    admin, send, process = (
        traces.one(n) for n in ("admin click", "send default", "process default")
    )
    assert parent_id(send) == span_id(admin)
    assert (send.attributes or {})["due.schedule"] == "billing"
    assert process.parent is None  # not caused by the click: a root
    assert process.context.trace_id != send.context.trace_id  # type: ignore[union-attr]
    (link,) = process.links
    assert (link.context.span_id, dict(link.attributes or {})) == (
        span_id(send),
        {"due.link": "schedule_run"},
    )
    assert (process.attributes or {})["due.schedule"] == "billing"
    assert parent_id(traces.one("billing")) == span_id(process)


def test_a_run_the_scheduler_makes_links_to_the_scheduler_s_send_span(
    app: due.App, traces: Traces, clock: FakeClock
) -> None:
    @app.task(name="tick")
    def tick() -> None: ...

    app.add_schedule("ticker", every="1m", task=tick)
    app.sync_schedules()
    clock.advance(timedelta(minutes=1, seconds=1))
    asyncio.run(scheduler_of(app, clock).run_once())
    assert len(drain(app).succeeded) == 1
    send, process = traces.one("send default"), traces.one("process default")
    assert send.parent is None and process.parent is None
    assert [link.context.span_id for link in process.links] == [span_id(send)]


def scheduler_of(app: due.App, clock: FakeClock) -> Scheduler:
    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    return Scheduler(
        store=app.store,
        call=call,
        leadership=Leadership(DatabaseLeases(app.store), "leader", clock, ttl=10),
        database_now=clock.now,
    )


def test_an_async_handler_runs_in_its_span_on_the_loop(app: due.App, traces: Traces) -> None:
    @app.task(name="fetch")
    async def fetch() -> None:
        await asyncio.sleep(0)
        with traces.tracer.start_as_current_span("awaited work"):
            await asyncio.sleep(0)

    with traces.tracer.start_as_current_span("web request"):
        fetch.enqueue()
    drain(app)
    process = traces.one("process default")
    assert parent_id(traces.one("awaited work")) == span_id(process)
    assert parent_id(process) == span_id(traces.one("send default"))


def test_with_enqueue_spans_off_the_current_span_is_carried(app: due.App, traces: Traces) -> None:
    DueInstrumentor().uninstrument()
    DueInstrumentor().instrument(tracer_provider=traces.provider, enqueue_spans=False)

    @app.task(name="t")
    def t() -> None: ...

    with traces.tracer.start_as_current_span("web request") as web:
        inside = t.enqueue()
    outside = t.enqueue()
    assert traces.named("send default") == []
    assert stored_payload(app, inside.id)["headers"] == {
        "traceparent": traceparent(web)  # type: ignore[arg-type]
    }
    assert "headers" not in stored_payload(app, outside.id)
    drain(app)
    by_job = {
        (s.attributes or {})["messaging.message.id"]: s for s in traces.named("process default")
    }
    assert parent_id(by_job[str(inside.id)]) == web.get_span_context().span_id
    assert by_job[str(outside.id)].parent is None


def test_nothing_is_stored_or_traced_once_uninstrumented(app: due.App, traces: Traces) -> None:
    @app.task(name="t")
    def t() -> None: ...

    with traces.tracer.start_as_current_span("web request"):
        before = t.enqueue()
    DueInstrumentor().uninstrument()
    with traces.tracer.start_as_current_span("web request"):
        after = t.enqueue()
    assert "headers" in stored_payload(app, before.id)
    assert stored_payload(app, after.id) == {"args": [], "kwargs": {}}
    assert sorted(drain(app).succeeded) == sorted([before.id, after.id])
    assert [span.name for span in traces.exporter.get_finished_spans()] == [
        "send default",
        "web request",
        "web request",
    ]


def test_without_an_sdk_nothing_is_stored(app: due.App, traces: Traces) -> None:
    """Instrumented, but the tracer is the API's no-op one: no span, no header."""
    DueInstrumentor().uninstrument()
    DueInstrumentor().instrument(tracer_provider=trace.NoOpTracerProvider())

    @app.task(name="t")
    def t() -> None: ...

    job = t.enqueue()
    assert stored_payload(app, job.id) == {"args": [], "kwargs": {}}
    assert drain(app).succeeded == [job.id]


def test_the_instrumentor_names_due_as_what_it_instruments() -> None:
    assert list(DueInstrumentor().instrumentation_dependencies()) == ["due"]


def test_the_core_imports_no_opentelemetry() -> None:
    code = (
        "import sys, due, due.cli, due.worker.worker, due.web.app, due.testing\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_pieces_are_known_by_their_arguments_not_their_trace_context(
    app: due.App, traces: Traces
) -> None:
    """Spawned again, a piece is the same piece, though each spawn stores
    another context; a piece's enqueue is a child of its parent's attempt."""

    @app.task(name="piece")
    def piece(n: int) -> None: ...

    @app.task(name="parent")
    def parent(ctx: due.Context) -> None:
        ctx.spawn(piece, [(1,), (2,)])
        ctx.spawn(piece, [(1,), (2,), (3,)])

    job = parent.enqueue()
    drain(app)
    assert app.get(job.id).pieces == due.Pieces(3, 3, 0)
    parent_span = next(
        span
        for span in traces.named("process default")
        if (span.attributes or {})["due.task"] == "parent"
    )
    sends = [s for s in traces.named("send default") if (s.attributes or {})["due.task"] == "piece"]
    assert len(sends) == 5 and {parent_id(s) for s in sends} == {span_id(parent_span)}


def test_an_async_attempt_stopped_at_an_await_ends_its_span(app: due.App, traces: Traces) -> None:
    """A cancel request stops it (written cancelled); a lost lease stops it
    (nothing written): each attempt's span ends, saying which."""
    from tests.helpers.database import plain_transaction
    from tests.integration.test_worker import make_worker, run, settle

    @app.task(name="wait")
    async def wait() -> None:
        await asyncio.sleep(3600)

    cancelled, overtaken = wait.enqueue(), wait.enqueue()

    async def scenario() -> None:
        worker = make_worker(app)
        await worker.producers["default"].run_once()
        await settle()
        app.cancel(cancelled.id)
        with plain_transaction(app.url) as conn:  # another attempt takes it over
            bump = "UPDATE due_jobs SET lease_token = lease_token + 1 WHERE id = "
            conn.execute(f"{bump}{overtaken.id}")
        await worker.heartbeater.run_once()
        await settle()
        await worker.completer.run_once()
        assert app.get(cancelled.id).state is due.JobState.CANCELLED

    run(scenario)
    spans = {
        (s.attributes or {})["messaging.message.id"]: s for s in traces.named("process default")
    }
    assert len(spans) == 2
    stopped, lost = spans[str(cancelled.id)], spans[str(overtaken.id)]
    assert (stopped.attributes or {})["due.job.outcome"] == "cancelled"
    assert stopped.status.status_code is StatusCode.UNSET
    assert (lost.attributes or {})["due.job.outcome"] == "lease_lost"
    assert (lost.attributes or {})["error.type"] == "LeaseLost"
    assert lost.status.status_code is StatusCode.ERROR


def test_headers_changed_by_hand_into_other_values_are_not_handed_on(
    app: due.App, traces: Traces
) -> None:
    @app.task(name="greet")
    def greet() -> str:
        return "hello"

    job = greet.enqueue()
    with plain_transaction(app.url) as conn:
        changed = '{"args": [], "kwargs": {}, "headers": {"traceparent": 5, "tracestate": []}}'
        conn.execute(f"UPDATE due_jobs SET payload = '{changed}' WHERE id = {job.id}")
    assert drain(app).succeeded == [job.id]
    process = traces.one("process default")  # a trace of its own: nothing to carry on
    assert process.parent is None and process.links == ()
