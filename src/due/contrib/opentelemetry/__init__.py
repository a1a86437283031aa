"""Tracing with OpenTelemetry: a span per enqueue and per attempt, one trace
from the request that enqueued a job to the handler that ran it.

Install the extra (`pip install 'due[otel]'`) and turn it on the way
OpenTelemetry's instrumentations are turned on::

    from due.contrib.opentelemetry import DueInstrumentor

    DueInstrumentor().instrument()

or with no code at all, `opentelemetry-instrument due worker ...`, which finds
it under the `opentelemetry_instrumentor` entry point. The spans, their
attributes and links are described in the how-to (docs/howto/tracing.md).
"""

from due.contrib.opentelemetry.instrumentor import DueInstrumentor

__all__ = ["DueInstrumentor"]
