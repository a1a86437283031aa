"""An SDK TracerProvider exporting to memory, and the instrumentor on it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from due.contrib.opentelemetry import DueInstrumentor


@dataclass
class Traces:
    exporter: InMemorySpanExporter
    tracer: Tracer
    """The test's own spans (a web request, a handler's work)."""
    provider: TracerProvider

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span


@pytest.fixture
def traces() -> Iterator[Traces]:
    """Spans exported to memory; due instrumented on that provider."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = DueInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield Traces(exporter, provider.get_tracer("tests"), provider)
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        provider.shutdown()
