"""One trace across real processes: a web process enqueues inside a span; a
`due worker` started by `opentelemetry-instrument` (which finds the
instrumentor under its entry point: no code change) runs the job. Each
exports its spans to a file (ConsoleSpanExporter)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import due
from tests.helpers.waiting import wait_until
from tests.helpers.workers import REPOSITORY

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def exported(path: Path) -> dict[str, dict[str, Any]]:
    """The spans ConsoleSpanExporter wrote (JSON objects one after another), by name."""
    text = path.read_text() if path.exists() else ""
    decoder, spans, at = json.JSONDecoder(), {}, 0
    while (at := _skip_space(text, at)) < len(text):
        try:
            span, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            break  # a span still being written
        spans[span["name"]] = span
    return spans


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def test_one_trace_from_the_web_process_to_the_worker_process(
    sqlite_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "DUE_DATABASE_URL": sqlite_url,
        "PYTHONPATH": f"{REPOSITORY}{os.pathsep}{REPOSITORY / 'src'}",
    }
    due.App(sqlite_url).migrate()
    web_file, worker_file = tmp_path / "web-spans.json", tmp_path / "worker-spans.json"
    subprocess.run(
        [sys.executable, "-m", "tests.apps.traced_app", str(web_file)],
        env=env,
        cwd=REPOSITORY,
        check=True,
        timeout=60,
    )
    worker_env = {
        **env,
        "OTEL_SERVICE_NAME": "worker",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # milliseconds: exported soon after they end
    }
    command = [str(BIN / "opentelemetry-instrument"), str(BIN / "due")]
    command += ["--app", "tests.apps.traced_app:app", "worker", "-q", "billing=1"]
    with open(worker_file, "wb") as out, open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            command,
            env=worker_env,
            cwd=REPOSITORY,
            stdout=out,
            stderr=log,
            start_new_session=True,
        )
    try:
        # The handler's span ends before the attempt's, and the batch processor
        # may export them in two batches: wait for both, not the first alone.
        worker_spans = wait_until(
            lambda: (
                {"render invoice", "process billing"} <= (spans := exported(worker_file)).keys()
                and spans
            ),
            timeout=60,
            what="the worker's spans",
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    web_spans = exported(web_file)
    request, send = web_spans["POST /invoices"], web_spans["send billing"]
    process, render = worker_spans["process billing"], worker_spans["render invoice"]
    trace_id = request["context"]["trace_id"]
    assert {span["context"]["trace_id"] for span in (send, process, render)} == {trace_id}
    assert send["parent_id"] == request["context"]["span_id"]
    assert process["parent_id"] == send["context"]["span_id"]
    assert render["parent_id"] == process["context"]["span_id"]
    assert process["kind"] == "SpanKind.CONSUMER"
    assert process["attributes"]["messaging.destination.name"] == "billing"
    assert process["resource"]["attributes"]["service.name"] == "worker"
