"""The instrumentor, and the hooks it registers with `due.instrumentation`.

At enqueue, a PRODUCER span `send {queue}` is started and ended as the job is
prepared (or, with `enqueue_spans=False`, no span: the current one is
carried), and its W3C trace context (`traceparent`, `tracestate`) is stored
with the job: always W3C, whatever `OTEL_PROPAGATORS` says, so that any
worker can read it.

At each attempt, a CONSUMER span `process {queue}` is current while the
handler runs. Its parent is the stored context; for a schedule's run it is
the root of a trace of its own with a link to the stored context (the run
was made by the scheduler, not caused by a request); and from the second
attempt on, it also links to the first attempt's span, whose context the
first attempt kept in its entry of the job's history (an attempt whose
worker died keeps none: the link then goes to the earliest that did).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.instrumentor import (
    BaseInstrumentor,
)
from opentelemetry.trace import (
    Link,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    TracerProvider,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from due import instrumentation
from due._version import __version__
from due.core.jobs import JobState
from due.instrumentation import AttemptEnd, AttemptInfo, Sending

SYSTEM = "due"
OUTCOMES = {
    JobState.SUCCEEDED: "succeeded",
    JobState.QUEUED: "retry",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
    JobState.WAITING: "waiting",
    None: "lease_lost",
}
"""`due.job.outcome` by what the attempt's end writes (None: nothing, its lease was lost)."""
_FAILED = frozenset({JobState.QUEUED, JobState.FAILED, None})
_API_ALONE = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_W3C = TraceContextTextMapPropagator()
_NO_PARENT = Context()


class DueInstrumentor(BaseInstrumentor):
    """Traces due's jobs: `DueInstrumentor().instrument()`, `.uninstrument()`.

    `instrument()` takes, besides BaseInstrumentor's own arguments,
    `tracer_provider=` (else the global one) and `enqueue_spans=` (True, the
    default: a PRODUCER span `send {queue}` per job enqueued; False: no span
    of its own, the span current at the enqueue is carried, and a job enqueued
    outside any span carries nothing).
    """

    _tracing: _Tracing | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """What must be installed for it to apply: due itself."""
        return ("due",)

    def _instrument(self, **kwargs: Any) -> None:
        provider = kwargs.get("tracer_provider")
        trace.get_tracer_provider()  # sets the global one OTEL_PYTHON_TRACER_PROVIDER names
        tracer = trace.get_tracer(__name__, __version__, tracer_provider=provider)
        enqueue_spans = bool(kwargs.get("enqueue_spans", True))
        tracing = _Tracing(tracer, provider, enqueue_spans=enqueue_spans)
        self._tracing = tracing
        instrumentation.add_enqueue_hook(tracing.sending)
        instrumentation.add_attempt_hook(tracing.attempt)

    def _uninstrument(self, **kwargs: Any) -> None:
        tracing, self._tracing = self._tracing, None
        if tracing is not None:
            instrumentation.remove_enqueue_hook(tracing.sending)
            instrumentation.remove_attempt_hook(tracing.attempt)


class _Tracing:
    """The hooks, bound to one tracer."""

    def __init__(
        self, tracer: Tracer, provider: TracerProvider | None, *, enqueue_spans: bool
    ) -> None:
        self._tracer = tracer
        self._provider = provider
        self._silent_provider = isinstance(provider, _API_ALONE)
        self._enqueue_spans = enqueue_spans
        # Bound once, so that the same objects are registered and removed.
        self.sending = self._sending
        self.attempt = self._attempt

    def _silent(self) -> bool:
        """Whether the tracer records nothing: no SDK is configured (OpenTelemetry's
        API alone, whose tracer is a no-op until one is). Asked for every job,
        so asked cheaply: of the provider given, or whether a global one is set
        yet (`get_tracer_provider()` also reads the environment at every call,
        0.8 us, half of what an untraced attempt then costs)."""
        if self._provider is not None:
            return self._silent_provider
        return getattr(trace, "_TRACER_PROVIDER", False) is None

    def _sending(self, sending: Sending) -> dict[str, str] | None:
        """The trace context to store with a job being enqueued."""
        if not self._enqueue_spans or self._silent():  # no span of ours: carry the current one
            span = trace.get_current_span()
            return _carrier(span) if span.get_span_context().is_valid else None
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": sending.queue,
            "due.task": sending.task,
        }
        if sending.schedule is not None:
            attributes["due.schedule"] = sending.schedule
        span = self._tracer.start_span(
            f"send {sending.queue}", kind=SpanKind.PRODUCER, attributes=attributes
        )
        if not span.get_span_context().is_valid:  # no SDK: the API's no-op tracer
            return None
        try:
            return _carrier(span)
        finally:
            span.end()

    def _attempt(self, info: AttemptInfo) -> _Attempt | None:
        """The span of an attempt about to start (None when there is none to record)."""
        if not info.headers and not info.first_attempt and self._silent():
            return None  # the common case without an SDK: nothing to record or carry
        parent, links = _NO_PARENT, []
        if info.headers:
            stored = _W3C.extract(info.headers)
            context = trace.get_current_span(stored).get_span_context()
            if context.is_valid and info.schedule is None:
                parent = stored
            elif context.is_valid:  # a schedule's run: a trace of its own, linked
                links.append(Link(context, {"due.link": "schedule_run"}))
        if info.first_attempt:
            first = trace.get_current_span(_W3C.extract(info.first_attempt))
            if first.get_span_context().is_valid:
                links.append(Link(first.get_span_context(), {"due.link": "first_attempt"}))
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": info.queue,
            "messaging.message.id": str(info.job_id),
            "due.task": info.task,
            "due.job.attempt": info.attempt,
        }
        if info.schedule is not None:
            attributes["due.schedule"] = info.schedule
        span = self._tracer.start_span(
            f"process {info.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        if not span.get_span_context().is_valid:  # no SDK, and nothing stored to carry on
            return None
        return _Attempt(span)


class _Attempt:
    """One attempt's span: current while its handler runs, ended with the attempt."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def running(self) -> AbstractContextManager[object]:
        # The attempt's end records the error (a timeout too), not the context.
        return trace.use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )

    def ended(self, end: AttemptEnd) -> Mapping[str, str] | None:
        span = self.span
        span.set_attribute("due.job.outcome", OUTCOMES[end.state])
        if end.state in _FAILED:
            # error.type: the convention's low-cardinality name of what went
            # wrong (the exception's class), "_OTHER" when there is no exception.
            if end.error is not None:
                # Not span.record_exception(end.error): that writes str(error) and
                # its traceback as raised, and a handler's message may repeat a
                # redacted argument. The span says what the job's history says.
                span.add_event("exception", _exception_attributes(end, end.error))
                span.set_attribute("error.type", type(end.error).__qualname__)
            else:
                span.set_attribute("error.type", "_OTHER")
            span.set_status(Status(StatusCode.ERROR, _describe(end)))
        span.end()
        # Kept with the attempt's entry in the history: a retry links to it.
        return _carrier(span) if end.state is not JobState.SUCCEEDED else None


def _carrier(span: Span) -> dict[str, str] | None:
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, trace.set_span_in_context(span))
    return carrier or None


def _exception_attributes(end: AttemptEnd, error: BaseException) -> dict[str, str]:
    """The semantic conventions' exception event, as `record_exception` writes
    it, with the error's text as due stores it."""
    kind = type(error)
    module = kind.__module__
    return {
        "exception.type": f"{module}.{kind.__qualname__}"
        if module and module != "builtins"
        else kind.__qualname__,
        "exception.message": end.message or "",
        "exception.stacktrace": end.traceback or "",
        "exception.escaped": "False",
    }


def _describe(end: AttemptEnd) -> str:
    if end.error is None:
        return "the attempt failed"
    name = type(end.error).__name__
    return name if end.message is None else f"{name}: {end.message}"
