"""`make bench` and `make soak` keep working between the runs that measure
(`make test-bench`, which CI runs after `make test`).

Small runs of the real harnesses: the benchmark with due and the bare loops on
both stores (the peers need bench/.venv-peers, which `make bench` creates), and
the soak for its shortest run. What is checked is that they run and judge, not
their figures: this machine runs other tests meanwhile. They run apart from the
measured runs (DUE_BENCH_SCRATCH: their own files, results and databases).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.helpers.workers import REPOSITORY

sys.path.insert(0, str(REPOSITORY / "bench"))
import common  # bench/common.py: the harness's names for its databases
import run  # bench/run.py: its tables

pytestmark = pytest.mark.bench
RATIO = re.compile(r"\b(\d+)/(\d+)\b")


def run_apart(
    command: list[str], scratch: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """The command with its files, results and databases kept apart."""
    environment = {**os.environ, "DUE_BENCH_SCRATCH": str(scratch)}
    return subprocess.run(
        command, cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=timeout
    )


def drop_scratch_databases(scratch: Path) -> None:
    """The PostgreSQL databases of the run apart in `scratch`, named after it
    (its SQLite files are in `scratch`)."""
    pattern = common.scratch_db_prefix(str(scratch)).replace("_", "\\_") + "%"
    with psycopg.connect(f"{common.PG_SERVER}/postgres", autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", [pattern]
        ).fetchall()
        for (name,) in names:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_smoke_run_of_the_benchmark_measures_due_and_the_bare_loops(tmp_path: Path) -> None:
    command = [
        sys.executable, "bench/run.py", "--quick", "--runs", "1", "--no-setup",
        "--only", "drain,enqueue,latency", "--libs", "due,raw_sqlite,raw_pg",
    ]  # fmt: skip
    try:
        done = run_apart(command, tmp_path, timeout=600)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tables = done.stdout
    for backend, bare in (("sqlite", "raw_sqlite"), ("postgres", "raw_pg")):
        for title in (
            f"### Enqueue, single, {backend}",
            f"### Enqueue, side by side, 50 coroutines, {backend}",
            f"### Drain, noop, one worker process, {backend}",
            f"### Drain, sleep10, one worker process, {backend}",
            f"### Idle worker: pickup latency and lateness of +2 s jobs, {backend}",
        ):
            assert title in tables
        section = tables.split(f"### Drain, noop, one worker process, {backend}")[1]
        rows = section.split("###")[0].splitlines()
        assert any(row.startswith("| due |") for row in rows)
        assert any(row.startswith(f"| {bare} |") for row in rows)
        for lib in ("due", bare):  # each ran at batches of 1,000 too
            assert any(re.match(rf"\| {lib} \| [^|]*1000", row) for row in rows), rows
        best = tables.split(f"### Drain, noop, each library at its best setting tried, {backend}")
        assert len(best) == 2, f"no table of each library's best drain on {backend}"
        best_rows = best[1].split("###")[0].splitlines()
        for lib in ("due", bare):  # each ran at its own batch and at 1,000
            assert any(row.startswith(f"| {lib} |") for row in best_rows), best_rows
    rows = [line for line in tables.splitlines() if line.startswith("| ")]
    checks = [found for row in rows for found in RATIO.findall(row)]
    assert checks, "no row says how many of its runs were exactly once"
    assert all(ok == runs for ok, runs in checks), [c for c in checks if c[0] != c[1]]
    assert list((tmp_path / "results").glob("summary-*.md"))  # kept apart
    records = [json.loads(line) for line in (tmp_path / "results" / "results.jsonl").open()]
    drains = [r for r in records if r.get("test") == "drain" and "values" in r]
    assert {r["lib"] for r in drains} >= {"due", "raw_sqlite", "raw_pg"}
    for drain in drains:  # CPU per job, of the worker and (PostgreSQL) of the server
        cpu = drain["values"]
        # Counted in clock ticks (10 ms): a bare loop's quick drain may take less,
        # and so may due's in one claim of 1,000 (its --concurrency 1000 variant).
        least = 1 if drain["lib"] == "due" and not drain["extra_flags"] else 0
        assert cpu["worker_cpu_us"] >= least, drain
        if drain["backend"] == "postgres":
            assert cpu["server_cpu_us"] >= least, drain
        else:
            assert cpu["server_cpu_us"] is None, drain


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_shortest_soak_runs_and_judges(backend: str, tmp_path: Path) -> None:
    rate = 200
    command = [
        sys.executable, "bench/soak.py", "--minutes", "0.5", "--rate", str(rate),
        "--backend", backend, "--retention", "5s",
    ]  # fmt: skip
    try:
        done = run_apart(command, tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    windows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(windows) == 3, done.stdout[-3000:] + done.stderr[-3000:]
    assert all(w["backend"] == backend and w["acknowledged_per_s"] > 0 for w in windows)
    acknowledged = sum(w["acknowledged_per_s"] for w in windows) / len(windows)
    assert acknowledged >= 0.8 * rate
    measures = ["acknowledged jobs/s", "claim latency p99 ms", "jobs table bytes"]
    if backend == "postgres":
        measures.append("dead tuples")
    for measure in measures:
        assert f"| {measure}" in done.stdout
    judged_bad = "| NO |" in done.stdout
    assert done.returncode == (1 if judged_bad else 0), done.stderr[-3000:]
    assert len((tmp_path / "results" / "results.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    ("script", "options"),
    [
        ("shards_bench.py", ["--jobs", "1000", "--runs", "1"]),
        ("backlog_bench.py", ["--jobs", "5000", "--repeat", "1"]),
        ("args_search_bench.py", ["--jobs", "2000", "--repeat", "1"]),
        (
            "visibility_bench.py",
            ["--finished", "5000", "--queued", "500", "--future", "500", "--repeat", "1"],
        ),
        ("sqlite_contention.py", ["--seconds", "2", "--runs", "1"]),  # a table only
        (
            "thread_enqueue.py",
            ["--jobs", "200", "--runs", "1", "--threads", "1,4", "--processes", "2"],
        ),
        ("notify_cost.py", ["--jobs", "200", "--runs", "1", "--processes", "1,2"]),
        ("pickup_probe.py", ["--backend", "sqlite", "--n", "10"]),
        ("pickup_probe.py", ["--backend", "postgres", "--n", "10"]),
        ("web_enqueue.py", ["--jobs", "80", "--runs", "1", "--shapes", "1x1,2x2"]),
        (
            "timers_bench.py",
            ["--timers", "2000", "--finished", "1000", "--drain", "2000", "--runs", "1"],
        ),
    ],
)
def test_the_due_only_benchmarks_run(script: str, options: list[str], tmp_path: Path) -> None:
    """The smaller benchmarks of `make bench` (schedules and the pooler take
    minutes and are left to it), at small sizes."""
    try:
        done = run_apart([sys.executable, f"bench/{script}", *options], tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if script == "sqlite_contention.py":
        assert re.search(r"^\| 1 \| \d+ \|", done.stdout, re.MULTILINE)
    elif script == "notify_cost.py":  # both shapes, every notification heard
        for processes in (1, 2):
            assert re.search(
                rf"^\| {processes} \| [\d,]+ .* \| [\d,]+ .* \| [\d.]+ \|$", done.stdout, re.M
            )
        assert re.search(r"^notifications heard: ([\d,]+) of \1 sent$", done.stdout, re.M)
    elif script == "pickup_probe.py":  # every job timed, each hop shown
        for hop in ("enqueue", "total"):
            assert re.search(rf"^  {hop} +n=  10 ", done.stdout, re.M), done.stdout
        for hop in ("to_heard", "heard_to_on_due", "on_due_to_claim", "claim", "claim_to_start"):
            assert re.search(rf"^  {hop} +n= +\d+ p50 ", done.stdout, re.M), done.stdout
    elif script == "web_enqueue.py":  # each shape, with and without a worker, both stores
        for backend in ("sqlite", "postgres"):
            for worker in ("none", "running"):
                assert re.search(
                    rf"^\| {backend} \| {worker} \| 1x1 \| [\d,]+ .* \| 1.00 \|$", done.stdout, re.M
                )
                assert re.search(
                    rf"^\| {backend} \| {worker} \| 2x2 \| [\d,]+ .* \| [\d.]+ \|$",
                    done.stdout,
                    re.M,
                )
        assert re.search(r"^command: python\S* bench/web_enqueue.py --jobs 80", done.stdout, re.M)
    elif script == "thread_enqueue.py":
        for backend in ("sqlite", "postgres"):
            for threads, processes in ((1, 1), (4, 1), (1, 2)):
                row = rf"^\| {backend} \| {threads} \| {processes} \| [\d,]+ "
                assert re.search(row, done.stdout, re.M)
    else:
        assert (tmp_path / "results" / "results.jsonl").read_text().strip()
        if script == "timers_bench.py":  # both tables, the local server's CPU in each run
            assert "### sqlite: empty table vs 2,000 timers" in done.stdout
            server_row = r"^\| drain, server CPU us/job \| [\d,.]+ \| [\d,.]+ \|"
            assert re.search(server_row, done.stdout, re.M)
            # PostgreSQL's drains say whether an autovacuum of due_jobs met them
            autovacuum_row = (
                r"^\| drains that met an autovacuum of due_jobs \| [01] of 1 \| [01] of 1 \|"
            )
            assert re.search(autovacuum_row, done.stdout, re.M)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_limits_benchmark_measures_each_step(backend: str, tmp_path: Path) -> None:
    """bench/limits_bench.py --quick: the rate, the concurrency, a drain beside a
    waiting backlog and a drain through a limit that never binds, in real
    worker processes. Its figures mean nothing at these sizes, but the limits'
    own bounds must hold in any run."""
    command = [sys.executable, "bench/limits_bench.py", "--quick", "--backend", backend]
    try:
        done = run_apart(command, tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (tmp_path / "results" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["backend"] for r in records} == {backend}
    drains = {(r["step"], r["variant"]) for r in records if "variant" in r}
    assert drains == {
        ("backlog", "waiting"),
        ("backlog", "empty"),
        ("unbound", "wide"),
        ("unbound", "none"),
    }
    (rate,) = [r for r in records if r["step"] == "rate"]
    assert 0 < rate["max_in_1s"] <= 1000 and rate["starts_per_s"] > 0, rate
    (capped,) = [r for r in records if r["step"] == "concurrency"]
    assert 0 < capped["max_running_at_claims"] <= 50, capped
    (fill,) = [r for r in records if "fill_s" in r]
    assert fill["waiting"] == 1999  # all but the one its rate let start
    (after,) = [r for r in records if "still_waiting" in r]
    assert after["still_waiting"] == 1999  # the drains beside them let none go
    assert after["held_succeeded"] == 1  # the one its rate let start ran
    assert f"### Limits, {backend}" in done.stdout


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_limit_keys_benchmark_measures_pickups_beside_waiting_keys(
    backend: str, tmp_path: Path
) -> None:
    """bench/limit_keys_bench.py --quick: pickups of unlimited jobs beside keys
    that jobs wait for, and beside none, in real worker processes; none of the
    waiting jobs is let go (their keys' jobs run on)."""
    command = [sys.executable, "bench/limit_keys_bench.py", "--quick", "--backend", backend]
    try:
        done = run_apart(command, tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (tmp_path / "results" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    rounds = [r for r in records if "side" in r]
    assert {(r["backend"], r["side"], r["keys"]) for r in rounds} == {
        (backend, "none", 0),
        (backend, "keys", 200),
    }
    for r in rounds:
        assert r["pickup_ms_default"] > 0 and r["pickup_ms_other"] > 0, r
    (after,) = [r for r in records if "still_waiting" in r]
    assert after["still_waiting"] == 200
    assert f"### Pickup of unlimited jobs beside 200 waiting keys, {backend}" in done.stdout


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_workflows_benchmark_measures_each_step(backend: str, tmp_path: Path) -> None:
    """bench/workflows_bench.py --quick: release latencies, a fan-out, a chain
    and a plain drain, and a drain beside waiting steps, in real worker
    processes. Its figures mean nothing at these sizes, but every workflow
    must succeed, the fan-in step run once, and the waiting steps stay."""
    command = [sys.executable, "bench/workflows_bench.py", "--quick", "--backend", backend]
    try:
        done = run_apart(command, tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (tmp_path / "results" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["backend"] for r in records} == {backend}
    variants = {(r["step"], r["variant"]) for r in records if "variant" in r}
    assert variants == {
        ("throughput", "plain"),
        ("throughput", "fan"),
        ("throughput", "chain"),
        ("waiting", "waiting"),
        ("waiting", "empty"),
    }
    (latency,) = [r for r in records if r["step"] == "latency"]
    assert latency["chain"]["n"] == 49 and latency["fan_in"]["n"] == 5, latency
    assert latency["fan_out"]["n"] == 40, latency  # rungs after the first
    steps = [r for r in records if r.get("variant") in ("fan", "chain")]
    assert all(r["state"] == "succeeded" and r["steps"] == 200 for r in steps), steps
    (fan,) = [r for r in records if r.get("variant") == "fan"]
    assert fan["join_attempt"] == 1 and fan["join_release_ms"] >= 0, fan
    (fill,) = [r for r in records if "fill_s" in r]
    assert fill["waiting"] == 2000
    (after,) = [r for r in records if "still_waiting" in r]
    assert after == after | {"still_waiting": 2000, "blockers_queued": 1}
    assert f"### Workflows, {backend}" in done.stdout
    assert "| ... ratio of medians |" in done.stdout


def test_the_sqlalchemy_benchmark_counts_every_job_and_row(tmp_path: Path) -> None:
    """bench/sqlalchemy_bench.py --quick: each kind wrote what it says (jobs
    through due's own connection or an AsyncSession on asyncpg, rows beside)."""
    command = [sys.executable, "bench/sqlalchemy_bench.py", "--quick"]
    try:
        done = run_apart(command, tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (tmp_path / "results" / "results.jsonl").read_text().splitlines()
    written = {r["kind"]: (r["jobs"], r["rows"]) for r in map(json.loads, lines)}
    assert written == {"own": (50, 0), "session": (50, 0), "row": (0, 50), "row+job": (50, 50)}
    assert "(row+job - row)/own" in done.stdout


def test_the_cost_breakdown_measures_every_shape_on_both_sides(tmp_path: Path) -> None:
    """bench/costs.py: each shape at each batch size, and each enqueue, with CPU
    counted on the client and on the server (a meter reading nothing fails; the
    sizes keep every reading above the server's 10 ms clock tick)."""
    command = [
        sys.executable, "bench/costs.py", "--jobs", "2000", "--rounds", "1", "--batches", "1,20",
        "--single", "500", "--bulk", "10000",
    ]  # fmt: skip
    try:
        done = run_apart(command, tmp_path, timeout=300)
    finally:
        drop_scratch_databases(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = (tmp_path / "results" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    shapes = ("due", "due-table", "narrow-table", "bare")
    drains = [r for r in records if r["test"] == "drain"]
    enqueues = [r for r in records if r["test"] == "enqueue"]
    assert sorted((r["shape"], r["batch"]) for r in drains) == sorted(
        (shape, batch) for shape in shapes for batch in (1, 20)
    )
    singles = [(mode, shape) for mode in ("single", "single-async") for shape in ("due", "bare")]
    bulks = [("bulk", shape) for shape in shapes]
    assert sorted((r["mode"], r["shape"]) for r in enqueues) == sorted(singles + bulks)
    for record in records:
        assert record["wall_us"] > 0 and record["client_us"] > 0 and record["server_us"] > 0
    for shape in shapes:
        assert re.search(
            rf"^\| {shape} \| [\d.]+ / [\d.]+ \| [\d.]+ / [\d.]+ \|", done.stdout, re.M
        )


def test_a_process_trees_cpu_keeps_the_time_of_a_child_that_exited() -> None:
    """The meters read a tree's CPU twice and subtract: a PostgreSQL backend that
    exits between the reads must not take its time with it (the sum fell, and
    the cost breakdown read a negative server CPU, when another test's session
    ended during a measurement)."""
    tree = common.process_tree(os.getpid())
    before = common.cpu_seconds(tree)
    burn = "import time; end = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    after = common.cpu_seconds(common.process_tree(os.getpid()))
    assert after - before >= 0.25  # most of the child's 0.3 s: /proc counts 10 ms ticks


def test_a_one_thread_process_is_read_finer_than_a_clock_tick() -> None:
    """A quick drain's server is a few connections of a few milliseconds each: read
    in 10 ms ticks, each rounded down, it read as no CPU at all (the smoke run's
    10 ms drain on a fast hour, 2026-12-04). A process of one thread, as every
    PostgreSQL process is, is read to the microsecond."""
    burn = (
        "import sys, time\n"
        "print('ready', flush=True)\n"
        "for line in sys.stdin:\n"
        "    end = time.process_time() + 0.004\n"
        "    while time.process_time() < end: pass\n"
        "    print('burnt', flush=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == "ready\n"  # started: its start is not measured
        moved = []
        for _ in range(3):
            before = common.cpu_seconds([child.pid])
            child.stdin.write("burn\n")
            child.stdin.flush()
            assert child.stdout.readline() == "burnt\n"
            moved.append(common.cpu_seconds([child.pid]) - before)
    finally:
        child.kill()
        child.wait()
    # In ticks each reading would move by 0 or 10 ms; 4 ms of burning, and the
    # child's reading and writing of a line, read as 4 to 9.
    assert all(0.004 <= seconds < 0.009 for seconds in moved), moved


def drain_rows() -> run.Rows:
    """Drain results as run.py groups them: due at its case's own setting, in
    two processes and at 1,000; pgqueuer at three batches, one of which lost
    jobs. due's extra variants come first, as a rotated run may order them."""

    def runs(lib: str, setting: str, flags: str, *rates: float, ok: bool = True) -> run.Rows:
        values = {"acknowledged": True}
        recs = [
            {"lib": lib, "setting": setting, "value": rate, "ok": ok, "values": values}
            | {"extra_flags": flags}
            for rate in rates
        ]
        return {(lib, setting): recs}

    return {
        **runs("due", "concurrency=100, processes=2", "--processes 2", 30_000, 30_000, 30_000),
        **runs("due", "concurrency=1000", "--concurrency 1000", 12_000, 14_000, 13_000),
        **runs("due", "concurrency=100", "", 10_000, 11_000, 9_000),
        **runs("pgqueuer", "batch_size=100", "", 5_000, 6_500, 6_000),
        **runs("pgqueuer", "batch_size=1000", "--batch 1000", 6_500, 7_000, 6_000),
        # Faster, but a run lost jobs: not a best.
        **runs("pgqueuer", "batch_size=5000", "--batch 5000", 9_000, ok=False),
    }


def test_the_ratios_of_the_main_table_are_to_due_at_the_cases_own_setting() -> None:
    """Whichever of due's rows comes first, the 'due ÷ lib' column divides by
    the one without extra flags; with none of those, it says nothing."""
    rows = drain_rows()
    assert [r["value"] for r in run.due_base(rows)] == [10_000, 11_000, 9_000]
    del rows["due", "concurrency=100"]
    assert run.due_base(rows) == []


def test_each_librarys_best_drain_is_its_fastest_setting_of_one_process() -> None:
    """The issue's target is due against a peer at its best setting: the table
    picks each library's fastest setting (the median of its runs), never one of
    several worker processes nor one whose runs failed their checks, and divides
    due's best by each one's best."""

    rows = drain_rows()
    lines = run.best_table(rows, "postgres")
    body = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert f"| concurrency=1000 | 13,000 [12,000{run.DASH}14,000] |" in body["due"]
    assert f"| batch_size=1000 | 6,500 [6,000{run.DASH}7,000] |" in body["pgqueuer"]
    assert body["pgqueuer"].endswith("| 2.00 |")  # 13,000 / 6,500
    assert body["due"].endswith("| 1.00 |")


def test_drain_jobs_sets_the_size_of_the_no_op_drain_only() -> None:
    """`--drain-jobs 100000`: issue 42 compares due and pgqueuer on 100,000 jobs;
    the 10 ms jobs keep their own size."""

    def sizes(*argv: str) -> dict[str, str]:
        plan = run.make_plan(run.parse_args(["--only", "drain", "--backend", "sqlite", *argv]))
        return {case.variant: case.args[case.args.index("--n") + 1] for case in plan.cases}

    assert sizes() == {"noop": "20000", "sleep10": "20000"}
    assert sizes("--drain-jobs", "100000") == {"noop": "100000", "sleep10": "20000"}
