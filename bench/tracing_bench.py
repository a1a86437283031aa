"""Tracing (issue: OpenTelemetry): what does the instrumentor cost a worker's drain?

    .venv/bin/python bench/tracing_bench.py [--backend sqlite|postgres|both]
                                            [--runs 7] [--drain 20000] [--quick]
                                            [--kinds off,noop,sdk]

Three kinds of drain, each by one real worker (`python -m due worker --app
tracing_bench:app -q bench=100 --no-scheduler`) of --drain no-op sync jobs
enqueued beforehand (enqueue_many) with no worker running:

off      due alone: the instrumentor not installed.
noop     `DueInstrumentor().instrument()` called in the worker, but no SDK
         configured: the API's no-op tracer (target: within 3 % of off).
sdk      tracing on: an SDK TracerProvider with a BatchSpanProcessor and an
         exporter that drops the spans; the jobs were enqueued with tracing on
         too, so each carries a trace context that its span is a child of.

The kinds run in turn, their order rotated from one run to the next (--runs
each), on a database emptied before each drain. Jobs per second from the
first job's started_at to the last one's finished_at, as the database
stamped them. One JSON line per run (bench/results/results.jsonl), then a
table per backend: median [min-max] over the runs, each kind against off,
and the cost of tracing per job in microseconds. Then the hooks' own cost
per call, in process (no worker, no database). `--quick`: small sizes, one
run each (a smoke run; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import due  # noqa: E402

KINDS = ("off", "noop", "sdk")
URL_VARIABLE = "DUE_TRACING_BENCH_URL"
KIND_VARIABLE = "DUE_TRACING_BENCH_KIND"
TASK = "tracing_bench.noop"
QUEUE = "bench"


def define(application: due.App) -> due.Task[[], None]:
    @application.task(name=TASK, queue=QUEUE)
    def noop() -> None:
        return None

    return noop


def trace_on(kind: str) -> Any:
    """Tracing as `kind` says, in this process; the SDK's provider, if any."""
    if kind == "off":
        return None
    from opentelemetry import trace

    from due.contrib.opentelemetry import DueInstrumentor

    if kind == "noop":  # no SDK configured: the global provider is the API's proxy
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        DueInstrumentor().instrument()
        return None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        """Takes the spans and drops them: the cost up to the exporter's door."""

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    DueInstrumentor().instrument(tracer_provider=provider)
    return provider


def trace_off(provider: Any) -> None:
    from due.contrib.opentelemetry import DueInstrumentor

    DueInstrumentor().uninstrument()
    if provider is not None:
        provider.shutdown()


# The worker's app: `--app tracing_bench:app`, traced as its environment says.
if URL_VARIABLE in os.environ:
    app = due.App(os.environ[URL_VARIABLE])
    define(app)
    trace_on(os.environ.get(KIND_VARIABLE, "off"))


def clear(url: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("DELETE FROM due_jobs")
    else:
        database = url.rsplit("/", 1)[1]
        common.pg_execute(database, "DELETE FROM due_jobs")
        common.pg_execute(database, "VACUUM due_jobs")


def scalar(url: str, query: str) -> Any:
    if url.startswith("sqlite"):
        return common.sqlite_scalar(url.removeprefix("sqlite:///"), query)
    return common.pg_scalar(url.rsplit("/", 1)[1], query)


def drain_run(url: str, application: due.App, noop: Any, kind: str, n: int) -> dict[str, Any]:
    """Enqueue n jobs on a paused queue (traced as the worker will be: their
    context stored), start one worker, and once it has registered, resume the
    queue: the rate the database's times say, and the worker's CPU per job
    (its start-up left out)."""
    application.pause_queue(QUEUE)
    provider = trace_on("sdk") if kind == "sdk" else None
    try:
        for start in range(0, n, common.CHUNK):
            application.enqueue_many([noop.request() for _ in range(min(common.CHUNK, n - start))])
    finally:
        if kind == "sdk":
            trace_off(provider)
    log = common.WORK_DIR / f"tracing_drain_{kind}.log"
    command = [sys.executable, "-m", "due", "worker", "--app", "tracing_bench:app"]
    command += ["-q", f"{QUEUE}=100", "--no-scheduler", "--log-level", "warning"]
    env = {URL_VARIABLE: url, KIND_VARIABLE: kind, "PYTHONPATH": str(BENCH)}
    worker = common.spawn(command, log, env)
    try:
        registered = f"SELECT count(*) FROM due_workers WHERE pid = {worker.pid}"
        ready = common.wait_until(
            lambda: scalar(url, registered) > 0, timeout=60, abort=lambda: worker.poll() is not None
        )
        assert ready, f"the {kind} worker did not start: see {log}"
        cpu_before = common.cpu_seconds(common.process_tree(worker.pid))
        application.resume_queue(QUEUE)
        done = common.wait_until(
            lambda: (
                not application.jobs(task=TASK, state="queued", limit=1)
                and not application.jobs(task=TASK, state="running", limit=1)
            ),
            timeout=600,
            abort=lambda: worker.poll() is not None,
        )
        cpu = common.cpu_seconds(common.process_tree(worker.pid)) - cpu_before
    finally:
        common.stop_due_worker(worker)
    assert done, f"the {kind} worker did not drain {n} jobs: see {log}"
    jobs = application.jobs(task=TASK, limit=n + 1)
    failed = [job for job in jobs if job.state is not due.JobState.SUCCEEDED]
    assert len(jobs) == n and not failed, f"{len(failed)} of {len(jobs)} jobs did not succeed"
    seconds = (
        max(job.finished_at for job in jobs if job.finished_at)
        - min(job.started_at for job in jobs if job.started_at)
    ).total_seconds()
    return {
        "jobs": len(jobs),
        "seconds": seconds,
        "jobs_per_s": common.jobs_per_s(n, seconds),
        "worker_cpu_us_per_job": cpu / n * 1e6,
    }


def one_backend(backend: str, args: argparse.Namespace) -> None:
    url = common.fresh_due_url(backend, "tracing")
    application = due.App(url)
    application.migrate()
    noop = define(application)
    kinds = tuple(args.kinds.split(","))
    figures: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    for run in range(args.runs):
        shift = run % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            clear(url)
            result = drain_run(url, application, noop, kind, args.drain)
            record = {"bench": "tracing", "backend": backend, "step": "drain", "kind": kind}
            common.save({**record, "run": run, "at": time.time(), **result})
            figures[kind].append(result["jobs_per_s"])
            cpu[kind].append(result["worker_cpu_us_per_job"])
    application.close()
    report(backend, figures, cpu)


def report(backend: str, figures: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    """A markdown table: each kind's drain rate and worker CPU, and against off."""
    off, off_cpu = common.spread(figures["off"])["median"], common.spread(cpu["off"])["median"]
    print(
        f"\n### {backend}: drain of no-op jobs, median [min-max] over {len(figures['off'])} runs\n"
    )
    print("| kind | jobs/s | against off | worker CPU us/job | against off |")
    print("|---|---|---|---|---|")
    for kind, rates in figures.items():
        s, c = common.spread(rates), common.spread(cpu[kind])
        rate = f"{s['median']:,.0f} [{s['min']:,.0f}-{s['max']:,.0f}]"
        used = f"{c['median']:,.1f} [{c['min']:,.1f}-{c['max']:,.1f}]"
        against = against_cpu = ""
        if kind != "off" and off and s["median"] and off_cpu and c["median"]:
            against = f"{kind}/off {s['median'] / off:.3f}"
            against += f" ({(1 / s['median'] - 1 / off) * 1e6:+.1f} us per job)"
            against_cpu = f"{c['median'] / off_cpu:.3f} ({c['median'] - off_cpu:+.1f} us per job)"
        print(f"| {kind} | {rate} | {against} | {used} | {against_cpu} |")


def hook_costs(calls: int) -> None:
    """The hooks' own cost per call, in this process (no worker, no database):
    what the drain's spread on a shared machine cannot resolve."""
    from datetime import UTC, datetime

    from due import instrumentation
    from due.core.jobs import JobState
    from due.core.records import ClaimedJob
    from due.instrumentation import AttemptEnd, Sending, attempt_info

    def enqueue() -> None:
        if instrumentation.enqueue_hooks:  # as request.prepare asks
            instrumentation.headers_for(sending)

    def attempt(job: ClaimedJob) -> None:
        if not instrumentation.attempt_hooks:  # as the executor asks
            return
        observers = instrumentation.observers_for(attempt_info(job))
        if observers:
            with instrumentation.running(observers):
                pass
            instrumentation.ended(observers, AttemptEnd(JobState.SUCCEEDED))

    def per_call(fn: Any) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - started) / calls * 1e6

    at = datetime(2030, 1, 1, tzinfo=UTC)
    sending = Sending(TASK, QUEUE)
    print(f"\n### The hooks in process, us per call ({calls:,} calls)\n")
    print("| | off | noop (no SDK) | sdk (BatchSpanProcessor, dropped) |")
    print("|---|---|---|---|")
    rows: dict[str, list[float]] = {"enqueue (the send span)": [], "attempt, whole": []}
    for kind in KINDS:
        provider = trace_on(kind)
        headers = instrumentation.headers_for(sending) if kind != "off" else None
        job = ClaimedJob(1, TASK, QUEUE, 0, (), {}, 1, 3, 1, at, at, at, headers=headers)
        rows["enqueue (the send span)"].append(per_call(enqueue))
        rows["attempt, whole"].append(per_call(lambda job=job: attempt(job)))
        if kind != "off":
            trace_off(provider)
    for name, (off, noop, sdk) in rows.items():
        print(f"| {name} | {off:.2f} | {noop:.2f} | {sdk:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--kinds", default=",".join(KINDS), help="off first, then any of noop,sdk")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.kinds.split(",")[0] != "off" or not set(args.kinds.split(",")) <= set(KINDS):
        parser.error(f"--kinds: off, then any of noop,sdk (got {args.kinds!r})")
    if args.quick:
        args.runs, args.drain = 1, 300
    for backend in ["sqlite", "postgres"] if args.backend == "both" else [args.backend]:
        one_backend(backend, args)
    hook_costs(1_000 if args.quick else 100_000)


if __name__ == "__main__":
    main()
