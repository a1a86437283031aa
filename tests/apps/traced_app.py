"""The app of the tracing process test: a "web" process enqueues in a span
(`python -m tests.apps.traced_app SPANS_FILE`), a worker started with
`opentelemetry-instrument due --app tests.apps.traced_app:app worker` runs it."""

from __future__ import annotations

import sys

from opentelemetry import trace

import due

app = due.App()  # DUE_DATABASE_URL


@app.task(name="send_invoice", queue="billing")
def send_invoice(number: int) -> None:
    with trace.get_tracer("billing").start_as_current_span("render invoice"):
        pass


def web(spans_file: str) -> None:
    """What a web process does: its own SDK set-up, a request's span, an enqueue."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    from due.contrib.opentelemetry import DueInstrumentor

    with open(spans_file, "w") as out:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
        DueInstrumentor().instrument(tracer_provider=provider)
        with provider.get_tracer("web").start_as_current_span("POST /invoices"):
            send_invoice.enqueue(42)
        provider.shutdown()
    app.close()


if __name__ == "__main__":
    web(sys.argv[1])
