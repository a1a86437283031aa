"""What the chaos run proves: counts read from the database, the file ledger and
the fault log, and the rows that must be zero.

- **lost**: a job due before the load ended that is not in a final state once
  the deployment drained (succeeded, failed for good, or cancelled).
- **run twice without a lost lease**: a job started more often than its
  record explains: every attempt but the last must have left an entry in the
  job's history (its error, a lost or released lease).
- **succeeded twice**: the job's own transaction committed twice (chaos_ledger).
- **two attempts alive at once**: the work of two attempts of one job overlaps
  in time (an attempt is alive from its start to its last step of work, a
  step timed at the safe point that allowed it: a process paused just after
  a safe point does that step late, and stops at its next one).
- **runs before run_at**: an attempt started before the time it was due.
- **scheduled times with zero or two runs**: a scheduled second of an
  every-second schedule with no record at all, or whose run succeeded twice.
- **parents completed twice**: a parent's completion job ran to success twice.
- **attempts counted that never started**: a job whose attempt count is more
  than the attempts its ledger shows started (a claim's lost reply, a worker
  that died before the handler began, a job handed back at shutdown: none may
  spend an attempt).
- **workers stopped by a task's exit**: a worker whose handler raised
  SystemExit or KeyboardInterrupt (its `exit` line), not alive at the end, and
  neither killed nor stopped by a fault: the exit stopped it (it must fail
  only its attempt).

Limits and workflows have rows of their own (flow_verdict.py): handlers over a
concurrency limit, steps started before their upstream ended, workflows stuck,
ends not explained, and (reported; asserted once rates count at the handler's
start) starts over a rate limit.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from due.core.limits import Limit
from tests.chaos import flow_verdict
from tests.chaos.faults import MAX_PAUSE_SECONDS, PACE_AFTER_SECONDS, PACE_BEFORE_SECONDS, Fault
from tests.chaos.flow_verdict import RATE_EXCEEDED, Action, FlowFindings

MUST_BE_ZERO = (
    "lost",
    "run twice without a lost lease",
    "succeeded twice",
    "two attempts alive at once",
    "runs before run_at",
    "scheduled times with zero or two runs",
    "parents completed twice",
    "attempts counted that never started",
    "workers stopped by a task's exit",
    *flow_verdict.ASSERTED,
)
COUNTED = (*MUST_BE_ZERO, RATE_EXCEEDED)
"""Every row counted: those that must be zero, and the rate's (asserted only
with flow_verdict.RATE_ASSERTED)."""
CLOCK_TOLERANCE = 0.002
"""Seconds: `run_at` and the ledger's times are both this host's clock."""


@dataclass
class Line:
    kind: str
    job: int
    attempt: int
    token: int
    pid: int
    at: float
    run_at: float
    detail: list[str]


def read_ledger(path: Path) -> list[Line]:
    lines = []
    for raw in path.read_text().splitlines() if path.exists() else []:
        kind, job, attempt, token, pid, at, run_at, *detail = raw.split()
        lines.append(
            Line(
                kind, int(job), int(attempt), int(token), int(pid), float(at), float(run_at), detail
            )
        )
    return lines


@dataclass
class Verdict:
    backend: str
    seconds: float
    faults: Counter[str]
    enqueued: int
    due: int
    completed: int
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[Any]] = field(default_factory=dict)
    rescue_to_rerun: list[float] = field(default_factory=list)
    failovers: list[float] = field(default_factory=list)
    executions: int = 0
    worker_exit_codes: list[int | None] = field(default_factory=list)
    skewed_executions: int = 0
    """Attempts started by the worker whose wall clock was an hour ahead."""
    skewed_refusals: int = 0
    """Times that worker refused to start (SQLite: the host's clock decides)."""
    stepped_executions: int = 0
    """Attempts started by the worker whose wall clock stepped, after its first step."""
    step_pace: list[tuple[float, float, float, float]] = field(default_factory=list)
    """That worker's steps: (when, seconds, its statements a second before, after)."""
    task_exits: int = 0
    """Attempts whose handler raised SystemExit or KeyboardInterrupt."""
    claims_cut: int = 0
    """Claims whose reply the proxy lost after their commit (cut_claim_reply)."""
    fault_log: list[Fault] = field(default_factory=list)
    unfinished: list[dict[str, Any]] = field(default_factory=list)
    """Jobs still unfinished after the drain, as the database had them (for a diagnosis)."""
    flows: FlowFindings | None = None
    """Limits and workflows: their figures (their rows are in `counts`)."""

    def ok(self) -> bool:
        return all(self.counts.get(name, 0) == 0 for name in asserted())

    def rows(self) -> list[tuple[str, str]]:
        faults = ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items())) or "none"
        table = [
            ("backend", self.backend),
            ("load, seconds", f"{self.seconds:.0f}"),
            ("faults", faults),
            ("jobs enqueued", str(self.enqueued)),
            ("jobs due", str(self.due)),
            ("jobs completed", str(self.completed)),
            ("executions (attempts started)", str(self.executions)),
            ("handlers that raised SystemExit or KeyboardInterrupt", str(self.task_exits)),
            (
                "worker an hour ahead (faketime)",
                f"{self.skewed_executions} attempts run, refused to start {self.skewed_refusals}x",
            ),
        ]
        if self.faults.get("clock_step"):
            table.append(("worker whose clock steps (+-1 h)", self._stepped()))
        if self.faults.get("cut_claim_reply"):
            table.append(("claims whose reply was lost after the commit", str(self.claims_cut)))
        table += self._flow_figures()
        table += [
            (
                f"{name} ({'must be 0' if name in asserted() else 'reported, not asserted yet'})",
                str(self.counts.get(name, 0)),
            )
            for name in COUNTED
        ]
        table += [
            ("rescue to rerun, p50 / p99 s", _percentiles(self.rescue_to_rerun)),
            ("leader failover after a kill, p50 / max s", _percentiles(self.failovers, 100)),
            ("throughput under faults, jobs/s", f"{self.completed / max(self.seconds, 1):.1f}"),
        ]
        return table

    def _flow_figures(self) -> list[tuple[str, str]]:
        flows = self.flows
        if flows is None:
            return []
        states = flows.workflow_states
        settled = flows.workflows_settled_after
        return [
            ("attempts of limited jobs", str(flows.limited_attempts)),
            (
                "limits, most handlers at work at once",
                _peaks(flows.limit_peaks),
            ),
            (
                f"rate limits, most starts in a window (less {flow_verdict.RATE_TOLERANCE} s)",
                _peaks(flows.rate_peaks),
            ),
            (
                "workflows succeeded / failed / cancelled / running",
                " / ".join(str(states.get(s, 0)) for s in (*flow_verdict.FINAL, "running")),
            ),
            (
                "workflows cancelled / retried by an operator",
                f"{flows.actions.get('cancel', 0)} / {flows.actions.get('retry', 0)}",
            ),
            (
                "last workflow ended after the load, s",
                "n/a" if settled is None else f"{settled:.1f}",
            ),
        ]

    def undisturbed_steps(self) -> list[tuple[float, float, float, float]]:
        """The steps whose pace no other fault disturbed (a pause, a kill, a restart
        near one moves any worker's statements)."""
        others = [f.at for f in self.fault_log if f.kind != "clock_step"]
        return [
            pace
            for pace in self.step_pace
            if not any(
                pace[0] - PACE_BEFORE_SECONDS - MAX_PAUSE_SECONDS
                <= at
                <= pace[0] + PACE_AFTER_SECONDS
                for at in others
            )
        ]

    def _stepped(self) -> str:
        text = f"{self.stepped_executions} attempts run after a step"
        if paces := self.undisturbed_steps():
            before = statistics.median(b for _, _, b, _ in paces)
            after = max(a for _, _, _, a in paces)
            text += (
                f"; statements a second, {len(paces)} steps without another fault near: "
                f"{before:.0f} before (p50), {after:.0f} after (max)"
            )
        return text

    def table(self) -> str:
        width = max(len(name) for name, _ in self.rows())
        lines = [f"{name:<{width}}  {value}" for name, value in self.rows()]
        for name, found in self.examples.items():
            if found:
                lines.append(f"  e.g. {name}: {found[:3]}")
        return "\n".join(lines)

    def write(self, path: Path) -> None:
        data = asdict(self)
        data["faults"] = dict(self.faults)
        path.write_text(json.dumps(data, indent=2, default=str))


def asserted() -> tuple[str, ...]:
    """The rows that must be zero for the run to pass."""
    return (*MUST_BE_ZERO, RATE_EXCEEDED) if flow_verdict.RATE_ASSERTED else MUST_BE_ZERO


def _peaks(peaks: dict[str, tuple[int, int]]) -> str:
    return (
        ", ".join(
            f"{name} {seen} (limit {allowed})" for name, (seen, allowed) in sorted(peaks.items())
        )
        or "n/a"
    )


def _percentiles(values: list[float], high: int = 99) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    top = ordered[-1] if high == 100 else ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered):.2f} / {top:.2f} (n={len(ordered)})"


EXECUTION_KINDS = ("start", "complete", "stamp")


def judge(
    *,
    backend: str,
    seconds: float,
    load_ended: float,
    enqueued: dict[int, float],
    jobs: dict[int, dict[str, Any]],
    successes: list[tuple[int, int, str]],
    schedule_runs: list[tuple[str, float, str, int | None]],
    ledger: list[Line],
    faults: list[Fault],
    leadership: list[tuple[float, int]],
    edges: list[tuple[int, int]] | None = None,
    workflows: dict[int, dict[str, Any]] | None = None,
    limits: dict[str, Limit] | None = None,
    actions: Sequence[Action] = (),
    alive_at_end: set[int] | None = None,
) -> Verdict:
    """`jobs`: id -> {state, run_at, errors (count), and for flow_verdict workflow,
    policy, limited, last_error, error_kinds}; `successes`: chaos_ledger rows
    (job, token, detail); `schedule_runs`: (schedule, scheduled_for, outcome, job);
    `leadership`: (time, pid) of each `scheduler.leading` event; `edges`:
    (upstream, step) job ids; `workflows`: id -> {state, created_at,
    finished_at}; `limits`: the limits' numbers, by name; `actions`: the
    operator's cancels and retries of workflows; `alive_at_end`: the pids of the
    workers alive when the drain ended (None: not known, exits not judged)."""
    due_ids = [job_id for job_id, run_at in enqueued.items() if run_at <= load_ended]
    final = {"succeeded", "failed", "cancelled"}
    verdict = Verdict(
        backend,
        seconds,
        Counter(fault.kind for fault in faults),
        len(enqueued),
        len(due_ids),
        sum(1 for job_id in enqueued if jobs.get(job_id, {}).get("state") in final),
    )
    by_job: dict[int, list[Line]] = defaultdict(list)
    for line in ledger:
        by_job[line.job].append(line)
    starts = {
        job: [line for line in lines if line.kind in EXECUTION_KINDS]
        for job, lines in by_job.items()
    }
    verdict.executions = sum(len(s) for s in starts.values())
    found: dict[str, list[Any]] = defaultdict(list)

    for job_id in due_ids:
        if jobs.get(job_id, {}).get("state") not in final:
            found["lost"].append((job_id, jobs.get(job_id, {}).get("state")))
    for job_id, lines in starts.items():
        tokens = {line.token for line in lines}
        counted = jobs.get(job_id, {}).get("attempt", 0)
        if counted > len(tokens):
            found["attempts counted that never started"].append((job_id, counted, len(tokens)))
        explained = jobs.get(job_id, {}).get("errors", 0)
        if len(tokens) - 1 > explained:
            found["run twice without a lost lease"].append((job_id, len(tokens), explained))
        for line in lines:
            if line.at < line.run_at - CLOCK_TOLERANCE:
                found["runs before run_at"].append((job_id, line.token, line.run_at - line.at))
        if _overlapping(by_job[job_id]):
            found["two attempts alive at once"].append(job_id)
    for job_id, count in Counter(job for job, _, _ in successes).items():
        if count > 1:
            found["succeeded twice"].append(job_id)
    completions = Counter(d.split()[1] for _, _, d in successes if d.startswith("complete "))
    found["parents completed twice"] = [p for p, n in completions.items() if n > 1]
    found["scheduled times with zero or two runs"] = _schedule_holes(
        schedule_runs, successes, load_ended
    )
    exits = [line for line in ledger if line.kind == "exit"]
    verdict.task_exits = len(exits)
    if alive_at_end is not None:
        found["workers stopped by a task's exit"] = _stopped_by_exits(exits, faults, alive_at_end)
    verdict.flows = flow_verdict.judge_flows(
        ledger=ledger,
        jobs=jobs,
        successes=successes,
        edges=edges or [],
        workflows=workflows or {},
        limits=limits or {},
        load_ended=load_ended,
        actions=actions,
    )
    found.update(verdict.flows.found)
    verdict.counts = {name: len(found.get(name, [])) for name in COUNTED}
    verdict.examples = {name: found[name] for name in COUNTED if found.get(name)}
    verdict.rescue_to_rerun = _rescue_delays(faults, by_job)
    verdict.failovers = _failovers(faults, leadership)
    verdict.fault_log = list(faults)
    return verdict


STOPPING_FAULTS = ("kill", "kill_leader", "term")


def _stopped_by_exits(exits: list[Line], faults: list[Fault], alive_at_end: set[int]) -> list[Any]:
    """The workers an `exit` line's handler stopped: not alive at the end, and no
    fault that stops a worker aimed at them (a SIGTERM may come first: a worker
    draining runs its handlers on). Its other handlers may still write a while
    after the exit, whichever way it went: lines after it prove nothing."""
    stopped = []
    for line in exits:
        if line.pid in alive_at_end:
            continue
        if any(f.kind in STOPPING_FAULTS and f.pid == line.pid for f in faults):
            continue
        stopped.append((line.pid, line.job, " ".join(line.detail)))
    return stopped


def _overlapping(lines: list[Line]) -> bool:
    """Whether the work of two attempts overlaps: from its start to its last step."""
    spans: dict[int, list[float]] = {}
    for line in lines:
        if line.kind in (*EXECUTION_KINDS, "step"):
            span = spans.setdefault(line.token, [line.at, line.at])
            span[0], span[1] = min(span[0], line.at), max(span[1], line.at)
    ordered = sorted(spans.values())
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ordered))


def _schedule_holes(
    runs: list[tuple[str, float, str, int | None]],
    successes: list[tuple[int, int, str]],
    load_ended: float,
) -> list[Any]:
    """Every second from each schedule's first time to the end of the load must be
    accounted for once, and no run may have succeeded twice."""
    holes: list[Any] = []
    stamped = Counter((job, d.split()[1]) for job, _, d in successes if d.startswith("stamp "))
    for (job, _), count in stamped.items():
        if count > 1:
            holes.append(("succeeded twice", job))
    times: dict[str, set[int]] = defaultdict(set)
    for schedule, scheduled_for, _, _ in runs:
        times[schedule].add(round(scheduled_for))
    for schedule, seen in times.items():
        expected = set(range(min(seen), int(load_ended) - 5))
        holes += [(schedule, second) for second in sorted(expected - seen)]
    return holes


def _rescue_delays(faults: list[Fault], by_job: dict[int, list[Line]]) -> list[float]:
    """For each attempt cut off by a kill or a pause: from the fault to the job's
    next start by another attempt."""
    delays = []
    for fault in faults:
        if fault.kind not in ("kill", "kill_leader", "pause") or fault.pid is None:
            continue
        for lines in by_job.values():
            cut = [line for line in lines if line.pid == fault.pid and line.at <= fault.at]
            if not cut:
                continue
            token = cut[-1].token
            if any(line.kind == "end" and line.token == token for line in cut):
                continue  # that attempt had ended before the fault
            later = [
                line.at
                for line in lines
                if line.kind in EXECUTION_KINDS and line.token != token and line.at > fault.at
            ]
            if later:
                delays.append(min(later) - fault.at)
    return delays


def _failovers(faults: list[Fault], leadership: list[tuple[float, int]]) -> list[float]:
    spans = []
    for fault in faults:
        if fault.kind != "kill_leader":
            continue
        after = [at for at, pid in leadership if at > fault.at and pid != fault.pid]
        if after:
            spans.append(min(after) - fault.at)
    return spans
