"""Run due, its peers and the bare "limit" loops side by side; print Markdown tables.

    python bench/run.py [--runs 3] [--only enqueue,drain,latency,rescue]
                        [--backend sqlite|postgres|both] [--quick] [--libs a,b] [--no-setup]
                        [--drain-jobs N]

`make bench` runs it with .venv/bin/python.  It first runs bench/setup-peers.sh (creates
bench/.venv-peers), then, test by test, runs every library R times, interleaved run by run
so that the box's noise falls on all of them alike.  Each step is one adapter invocation
(see bench/README.md, "Adapter contract") printing JSON lines; they are appended to
bench/results/results.jsonl and summarised as median [min-max] with due ÷ peer ratios.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402

DUE_PY = ROOT / ".venv" / "bin" / "python"
PEERS_PY = BENCH / ".venv-peers" / "bin" / "python"
RESULTS_FILE = common.RESULTS_DIR / "results.jsonl"
TEST_ORDER = ("enqueue", "drain", "latency", "rescue")
KIND_ORDER = {"due": 0, "peer": 1, "limit": 2}
DASH = "\u2013"  # en dash, for ranges and empty cells


@dataclass(frozen=True)
class Lib:
    name: str
    kind: str  # due | peer | limit
    backends: tuple[str, ...]
    script: Path
    python: Path


LIBS = (
    Lib("due", "due", ("sqlite", "postgres"), BENCH / "due_bench.py", DUE_PY),
    Lib("procrastinate", "peer", ("postgres",), BENCH / "peers" / "procrastinate.py", PEERS_PY),
    Lib("pgqueuer", "peer", ("postgres",), BENCH / "peers" / "pgqueuer.py", PEERS_PY),
    Lib("huey", "peer", ("sqlite",), BENCH / "peers" / "huey.py", PEERS_PY),
    Lib("raw_pg", "limit", ("postgres",), BENCH / "limits" / "raw_pg.py", PEERS_PY),
    Lib("raw_sqlite", "limit", ("sqlite",), BENCH / "limits" / "raw_sqlite.py", PEERS_PY),
)


@dataclass(frozen=True)
class Sizes:
    single: int
    bulk: int
    drain: int
    sleep: int
    latency: int
    scheduled: int
    rescue_wait: float


# The shapes of the issues: 20,000 no-op jobs; 20,000 jobs of 10 ms at concurrency 50.
BIG_BATCH = 1000
"""The no-op drain runs each library at its default batch and at this one: with
larger batches pgqueuer and the bare loops drain faster (a sweep of 2026-12-03,
bench/README.md "Each library at its best"), so a ratio to a peer's best setting
needs both."""
FULL = Sizes(
    single=5000, bulk=20000, drain=20000, sleep=20000, latency=200, scheduled=50, rescue_wait=120
)
# Quick, 1,000 jobs of 10 ms still take 0.2 s: 200 drained in about 45 ms on a fast
# hour, mostly before the CPU meter starts (at the first job's start), which then
# read no server CPU at all and failed the smoke test.
QUICK = Sizes(
    single=500, bulk=2000, drain=1000, sleep=1000, latency=40, scheduled=10, rescue_wait=40
)


@dataclass(frozen=True)
class Case:
    """One measurement shape, run for every library that has it."""

    test: str
    variant: str  # single|bulk|side_by_side for enqueue, noop|sleep10 for drain, "" otherwise
    args: tuple[str, ...]
    kinds: frozenset[str]
    timeout: float
    skip: frozenset[str] = frozenset()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (lib, flags): one more variant
    parallel: bool = False


def cases(sz: Sizes) -> list[Case]:
    everyone = frozenset({"due", "peer", "limit"})
    queues = frozenset({"due", "peer"})
    drain = ("--timeout", "240")
    return [
        Case("enqueue", "single", ("--mode", "single", "--n", f"{sz.single}"), everyone, 300),
        Case(
            "enqueue",
            "bulk",
            ("--mode", "bulk", "--n", f"{sz.bulk}"),
            everyone,
            300,
            skip=frozenset({"huey"}),
        ),
        Case(  # the async API's one-job call from 50 coroutines of one loop: huey has none
            "enqueue",
            "side_by_side",
            ("--mode", "side_by_side", "--n", f"{sz.single}"),
            queues,
            300,
            skip=frozenset({"huey"}),
        ),
        Case(
            "drain",
            "noop",
            ("--task", "noop", "--n", f"{sz.drain}", *drain),
            everyone,
            330,
            extra=(
                ("due", ("--processes", "2")),  # two worker processes, one database
                # Each at batches of 1,000 too: every one's best setting is in the table.
                *(
                    (lib, ("--concurrency", f"{BIG_BATCH}"))
                    for lib in ("due", "raw_pg", "raw_sqlite")
                ),
                ("pgqueuer", ("--batch", f"{BIG_BATCH}")),
            ),
        ),
        Case(
            "drain",
            "sleep10",
            ("--task", "sleep10", "--n", f"{sz.sleep}", "--concurrency", "50", *drain),
            queues,
            330,
        ),
        Case(
            "latency", "", ("--n", f"{sz.latency}", "--n-scheduled", f"{sz.scheduled}"), queues, 240
        ),
        Case(
            "rescue",
            "",
            ("--wait", f"{sz.rescue_wait:g}"),
            queues,
            sz.rescue_wait + 180,
            extra=(("procrastinate", ("--stalled-recipe",)),),
            parallel=True,
        ),
    ]


@dataclass(frozen=True)
class Step:
    lib: Lib
    backend: str
    case: Case
    flags: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        variant = "".join(f.strip("-").replace("-", "_") for f in self.flags)
        parts = [self.lib.name, self.backend, self.case.test, self.case.variant, variant]
        return "-".join(p for p in parts if p)

    def cmd(self) -> list[str]:
        return [
            str(self.lib.python),
            str(self.lib.script),
            self.case.test,
            "--backend",
            self.backend,
            *self.case.args,
            *self.flags,
        ]


@dataclass
class Running:
    step: Step
    proc: subprocess.Popen[bytes]
    out: Path
    t0: float


@dataclass
class Plan:
    run_id: str
    runs: int
    backends: tuple[str, ...]
    libs: list[Lib]
    cases: list[Case]
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- planning


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per library and test (default 3)")
    ap.add_argument("--only", default="", help="comma list of: " + ",".join(TEST_ORDER))
    ap.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--libs", default="", help="comma list of libraries (default: all)")
    ap.add_argument("--no-setup", action="store_true", help="do not run setup-peers.sh")
    ap.add_argument(
        "--drain-jobs",
        type=int,
        default=None,
        help="jobs in the no-op drain (default 20,000; issue 42 compares on 100,000, where "
        "pgqueuer's batch of 1,000 gains most)",
    )
    args = ap.parse_args(argv)
    unknown = set(filter(None, args.only.split(","))) - set(TEST_ORDER)
    if unknown:
        ap.error(f"--only: unknown test(s) {sorted(unknown)}")
    return args


def due_missing_reason() -> str | None:
    if not (BENCH / "due_bench.py").exists():
        return "bench/due_bench.py does not exist yet: the due side is skipped"
    if not DUE_PY.exists():
        return ".venv/bin/python is missing (run `make bench`): the due side is skipped"
    return None


def postgres_down() -> bool:
    if shutil.which("pg_isready") is None:
        return False
    rc = subprocess.run(
        ["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"], check=False, timeout=15
    ).returncode
    return rc != 0


def make_plan(args: argparse.Namespace) -> Plan:
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    wanted = set(filter(None, args.libs.split(",")))
    libs = [lib for lib in LIBS if not wanted or lib.name in wanted]
    only = set(filter(None, args.only.split(","))) or set(TEST_ORDER)
    sizes = QUICK if args.quick else FULL
    if args.drain_jobs:
        sizes = replace(sizes, drain=args.drain_jobs)
    chosen = [c for c in cases(sizes) if c.test in only]
    plan = Plan(time.strftime("%Y%m%d-%H%M%S"), args.runs, backends, libs, chosen)
    reason = due_missing_reason()
    if reason and any(lib.kind == "due" for lib in libs):
        plan.notes.append(reason)
        plan.libs = [lib for lib in libs if lib.kind != "due"]
    if not PEERS_PY.exists():
        # The bare loops need only psycopg and sqlite3, which due's environment has.
        if any(lib.kind == "peer" for lib in plan.libs):
            plan.notes.append(
                "bench/.venv-peers is missing (run `make bench` or bench/setup-peers.sh): "
                "the peers are skipped"
            )
        plan.libs = [
            replace(lib, python=DUE_PY) if lib.kind == "limit" else lib
            for lib in plan.libs
            if lib.kind != "peer"
        ]
    if "postgres" in backends and postgres_down():
        plan.notes.append("PostgreSQL is not reachable on 127.0.0.1:5432: postgres skipped")
        plan.backends = tuple(b for b in backends if b != "postgres")
    return plan


def steps_for(plan: Plan, case: Case) -> list[Step]:
    steps = []
    for lib in plan.libs:
        if lib.kind not in case.kinds or lib.name in case.skip:
            continue
        for backend in (b for b in plan.backends if b in lib.backends):
            steps.append(Step(lib, backend, case))
            steps += [Step(lib, backend, case, f) for name, f in case.extra if name == lib.name]
    return steps


def rotated(steps: list[Step], k: int) -> list[Step]:
    """Run k starts at a different library, so no one always goes first."""
    if not steps:
        return steps
    k %= len(steps)
    return steps[k:] + steps[:k]


# --------------------------------------------------------------------------- running


def setup_peers() -> None:
    print("# setting up bench/.venv-peers", file=sys.stderr, flush=True)
    subprocess.run(
        ["bash", str(BENCH / "setup-peers.sh")], stdout=sys.stderr, check=True, timeout=900
    )


def start(step: Step, log_dir: Path, run: int) -> Running:
    out = log_dir / f"{step.name}-r{run}.out"
    err = log_dir / f"{step.name}-r{run}.err"
    with out.open("wb") as fo, err.open("wb") as fe:
        proc = subprocess.Popen(
            step.cmd(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=fo,
            stderr=fe,
            start_new_session=True,
        )
    return Running(step, proc, out, time.monotonic())


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Timed out: SIGTERM the adapter (it kills its workers), then SIGKILL the group."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        common.kill_group(proc)


def finish(r: Running) -> tuple[list[dict[str, Any]], str | None]:
    """Wait (bounded by the case's timeout) and parse the JSON lines it printed."""
    left = r.step.case.timeout - (time.monotonic() - r.t0)
    try:
        rc = r.proc.wait(timeout=max(1.0, left))
    except subprocess.TimeoutExpired:
        stop(r.proc)
        return [], f"timed out after {r.step.case.timeout:g} s"
    recs = []
    for line in r.out.read_text().splitlines():
        with suppress(json.JSONDecodeError):
            recs.append(json.loads(line))
    if rc != 0 or not recs:
        return recs, f"exit code {rc}, {len(recs)} result line(s); see {r.out.with_suffix('.err')}"
    return recs, None


def tag(rec: dict[str, Any], step: Step, plan: Plan, run: int) -> dict[str, Any]:
    rec.update(run_id=plan.run_id, run=run, kind=step.lib.kind, cmd=" ".join(step.cmd()[1:]))
    rec["extra_flags"] = " ".join(step.flags)  # "": the case's own setting
    rec["load1"] = round(os.getloadavg()[0], 2)
    return rec


def error_record(step: Step, plan: Plan, run: int, error: str) -> dict[str, Any]:
    rec = {
        "lib": step.lib.name,
        "backend": step.backend,
        "test": step.case.test,
        "args": list(step.case.args) + list(step.flags),
        "error": error,
    }
    return tag(rec, step, plan, run)


def save(recs: Iterable[dict[str, Any]]) -> None:
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with RESULTS_FILE.open("a") as fh:
        for rec in recs:
            fh.write(json.dumps(rec) + "\n")


def run_batch(steps: list[Step], plan: Plan, run: int, parallel: bool) -> list[dict[str, Any]]:
    """Run steps one after the other (or all at once); never leaves one running."""
    log_dir = common.WORK_DIR / "run-logs" / plan.run_id
    log_dir.mkdir(parents=True, exist_ok=True)
    out: list[dict[str, Any]] = []
    pending: list[Running] = []
    try:
        for step in steps if parallel else []:
            pending.append(start(step, log_dir, run))
        for step in steps:
            if not parallel:
                pending.append(start(step, log_dir, run))
            out += collect(pending[0], plan, run)
            pending.pop(0)
    finally:
        for r in pending:
            stop(r.proc)
    return out


def collect(r: Running, plan: Plan, run: int) -> list[dict[str, Any]]:
    recs, error = finish(r)
    recs = [tag(rec, r.step, plan, run) for rec in recs]
    if error:
        recs.append(error_record(r.step, plan, run, error))
    save(recs)
    print(f"  {r.step.name} run {run}: {summary_line(recs)}", file=sys.stderr, flush=True)
    return recs


def summary_line(recs: list[dict[str, Any]]) -> str:
    parts = []
    for rec in recs:
        if "error" in rec:
            parts.append(f"ERROR {rec['error']}")
        else:
            parts.append(
                f"{rec['test']} {fmt(rec.get('value'))} {rec.get('unit', '')}"
                f"{'' if rec.get('ok') else ' (check failed)'}"
            )
    return "; ".join(parts)


def run_plan(plan: Plan) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for case in plan.cases:
        steps = steps_for(plan, case)
        print(f"# {case.test} {' '.join(case.args)}: {len(steps)} step(s)", file=sys.stderr)
        for run in range(plan.runs):
            results += run_batch(rotated(steps, run), plan, run, case.parallel)
    return results


# --------------------------------------------------------------------------- tables


def fmt(x: Any) -> str:
    if not isinstance(x, int | float):
        return DASH
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def values_of(recs: list[dict[str, Any]], key: str) -> list[float]:
    out = []
    for rec in recs:
        v = rec.get("value") if key == "value" else (rec.get("values") or {}).get(key)
        if isinstance(v, int | float):
            out.append(float(v))
    return out


def med_range(recs: list[dict[str, Any]], key: str = "value") -> str:
    s = common.spread(values_of(recs, key))
    if s["median"] is None:
        return DASH
    if s["min"] == s["max"]:
        return fmt(s["median"])
    return f"{fmt(s['median'])} [{fmt(s['min'])}{DASH}{fmt(s['max'])}]"


def ratio(base: list[dict[str, Any]], other: list[dict[str, Any]], key: str = "value") -> str:
    a = common.median(values_of(base, key))
    b = common.median(values_of(other, key))
    if a is None or not b:
        return DASH
    return f"{a / b:.2f}"


def ok_count(recs: list[dict[str, Any]]) -> str:
    return f"{sum(1 for r in recs if r.get('ok'))}/{len(recs)}"


Rows = dict[tuple[str, str], list[dict[str, Any]]]


def group_rows(recs: Iterable[dict[str, Any]]) -> Rows:
    rows: Rows = {}
    for rec in sorted(recs, key=lambda r: (KIND_ORDER.get(r.get("kind", ""), 9), r["lib"])):
        rows.setdefault((rec["lib"], rec.get("setting", "")), []).append(rec)
    return rows


def due_base(rows: Rows) -> list[dict[str, Any]]:
    """due's row at the case's own setting (not one of its extra variants)."""
    due = [recs for (lib, _), recs in rows.items() if lib == "due"]
    return next((recs for recs in due if not recs[0].get("extra_flags")), [])


def table(header: Sequence[str], body: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return [*lines, ""]


def pick(
    results: list[dict[str, Any]], backend: str, test: str, **match: Any
) -> list[dict[str, Any]]:
    return [
        r
        for r in results
        if "error" not in r
        and r.get("backend") == backend
        and r.get("test") == test
        and all(r.get(k) == v for k, v in match.items())
    ]


def enqueue_tables(results: list[dict[str, Any]], backend: str) -> list[str]:
    out = []
    for mode in ("single", "bulk", "side_by_side"):
        rows = group_rows(pick(results, backend, "enqueue", mode=mode))
        if not rows:
            continue
        base = due_base(rows)
        shown = mode.replace("_", " ")
        if mode == "side_by_side":
            shown += f", {common.SIDE_BY_SIDE} coroutines"
        out.append(f"### Enqueue, {shown}, {backend} (jobs/s; higher is better)\n")
        body = [
            [lib, str(recs[0]["n"]), med_range(recs), ok_count(recs), ratio(base, recs)]
            for (lib, _), recs in rows.items()
        ]
        out += table(["lib", "n", f"jobs/s median [min{DASH}max]", "rows ok", "due ÷ lib"], body)
    return out


def drain_tables(results: list[dict[str, Any]], backend: str) -> list[str]:
    out = []
    for task in ("noop", "sleep10"):
        rows = group_rows(pick(results, backend, "drain", task=task))
        if not rows:
            continue
        base = due_base(rows)
        out.append(f"### Drain, {task}, one worker process, {backend} (jobs/s; higher is better)\n")
        body = [
            [
                lib,
                setting,
                str(recs[0]["n"]),
                med_range(recs) + body_timed(recs),
                med_range(recs, "jobs_per_s_body"),
                med_range(recs, "ack_lag_s"),
                med_range(recs, "worker_cpu_us"),
                med_range(recs, "server_cpu_us"),
                med_range(recs, "startup_s"),
                ok_count(recs),
                ratio(base, recs),
            ]
            for (lib, setting), recs in rows.items()
        ]
        header = [
            "lib",
            "setting",
            "n",
            "first start → last acknowledged (DB)",
            "first start → last body end",
            "ack lag s",
            "worker CPU us/job",
            "server CPU us/job",
            "startup s",
            "exactly once",
            "due ÷ lib",
        ]
        out += table(header, body)
        if task == "noop":
            out += best_table(rows, backend)
    return out


def body_timed(recs: list[dict[str, Any]]) -> str:
    """The mark of a rate timed to the last job body's end: the library records
    no acknowledgement the database could show."""
    return "" if (recs[0].get("values") or {}).get("acknowledged") else " (body)"


def best_table(rows: Rows, backend: str) -> list[str]:
    """Each library at the setting of one worker process that drained fastest
    (median), and due's best against each one's best. A setting with a run that
    failed its checks (a job lost, run twice, or not done in time) is not a
    candidate."""
    best: dict[str, tuple[float, str, list[dict[str, Any]]]] = {}
    for (lib, setting), recs in rows.items():
        median = common.median(values_of(recs, "value"))
        several = "--processes" in recs[0].get("extra_flags", "")
        if several or median is None or not all(r.get("ok") for r in recs):
            continue
        if lib not in best or median > best[lib][0]:
            best[lib] = (median, setting, recs)
    if "due" not in best:
        return []
    due_best = best["due"][2]
    body = [
        [lib, setting, med_range(recs) + body_timed(recs), med_range(recs, "worker_cpu_us"),
         med_range(recs, "server_cpu_us"), ratio(due_best, recs)]
        for lib, (_, setting, recs) in best.items()
    ]  # fmt: skip
    title = f"### Drain, noop, each library at its best setting tried, {backend}\n"
    header = [
        "lib",
        "best setting",
        "jobs/s",
        "worker CPU us/job",
        "server CPU us/job",
        "due's best ÷ lib's best",
    ]
    return [title, *table(header, body)]


def latency_tables(results: list[dict[str, Any]], backend: str) -> list[str]:
    pickup = group_rows(pick(results, backend, "latency"))
    if not pickup:
        return []
    late = group_rows(pick(results, backend, "lateness"))
    base, base_late = due_base(pickup), due_base(late)
    body = []
    for key, recs in pickup.items():
        lrecs = late.get(key, [])
        body.append(
            [
                key[0],
                key[1],
                med_range(recs),
                med_range(recs, "p99_ms"),
                med_range(recs, "max_ms"),
                med_range(lrecs) if lrecs else "n/a",
                med_range(lrecs, "p99_ms") if lrecs else "n/a",
                ok_count(recs + lrecs),
                f"{ratio(base, recs)} / {ratio(base, recs, 'p99_ms')}",
                f"{ratio(base_late, lrecs)} / {ratio(base_late, lrecs, 'p99_ms')}",
            ]
        )
    header = [
        "lib",
        "setting",
        "pickup p50 ms",
        "p99 ms",
        "max ms",
        "+2 s lateness p50 ms",
        "p99 ms",
        "checks ok",
        "due ÷ lib pickup p50 / p99",
        "due ÷ lib lateness p50 / p99",
    ]
    title = (
        f"### Idle worker: pickup latency and lateness of +2 s jobs, {backend} (lower is better)\n"
    )
    return [title, *table(header, body)]


def rescue_table(results: list[dict[str, Any]]) -> list[str]:
    body = []
    for backend in ("sqlite", "postgres"):
        rows = group_rows(pick(results, backend, "rescue"))
        base = due_base(rows)
        for (lib, setting), recs in rows.items():
            outcomes = sorted({r.get("outcome", "?") for r in recs})
            body.append(
                [lib, backend, setting, med_range(recs), "; ".join(outcomes), ratio(base, recs)]
            )
    if not body:
        return []
    title = (
        "### Rescue: kill -9 of worker A 3 s into a 30 s job, worker B running (lower is better)\n"
    )
    header = ["lib", "backend", "setting", "re-run after kill, s", "outcome(s)", "due ÷ lib"]
    return [title, *table(header, body)]


def notes_section(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for rec in results:
        if "error" in rec:
            lines.append(
                f"- FAILED {rec['lib']} {rec['backend']} {rec['test']} "
                f"{' '.join(rec['args'])} (run {rec['run']}): {rec['error']}"
            )
    notes = {f"- {r['lib']} rescue: {r['note']}" for r in results if r.get("note")}
    return lines + sorted(notes)


def versions(results: list[dict[str, Any]]) -> str:
    seen = {r["lib"]: r.get("version", "") for r in results if "error" not in r}
    return ", ".join(f"{lib} {v}" for lib, v in seen.items())


def report(plan: Plan, results: list[dict[str, Any]], t_start: float) -> str:
    minutes = (time.monotonic() - t_start) / 60
    lines = [
        f"## due benchmark {plan.run_id} ({plan.runs} run(s) each, {minutes:.1f} min, "
        f"{os.cpu_count()} cores, load1 at end {os.getloadavg()[0]:.2f})",
        "",
        f"Versions: {versions(results)}. Figures: median [min{DASH}max] over runs; "
        "'due ÷ lib' = ratio of the medians (for 'limit' rows: due ÷ what the bare "
        "database loop allows).",
        "",
    ]
    lines += [f"> {note}" for note in plan.notes] + ([""] if plan.notes else [])
    for backend in plan.backends:
        lines += enqueue_tables(results, backend) + drain_tables(results, backend)
        lines += latency_tables(results, backend)
    lines += rescue_table(results) + notes_section(results)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    common.exit_on_sigterm()
    t_start = time.monotonic()
    if not args.no_setup:
        setup_peers()
    plan = make_plan(args)
    for note in plan.notes:
        print(f"# NOTE: {note}", file=sys.stderr)
    results = run_plan(plan)
    text = report(plan, results, t_start)
    common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (common.RESULTS_DIR / f"summary-{plan.run_id}.md").write_text(text)
    print(text)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
