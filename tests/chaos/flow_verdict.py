"""What the chaos run proves of limits and workflows, from the handlers' own ledger.

- **handlers over a concurrency limit**: more attempts of jobs counted against
  a limit (or one of its keys) at work at one moment than the limit allows.
  An attempt is at work from its `start` line to its last unit of work: a
  `step` (timed at the safe point that let it go on) or, for the attempt whose
  success committed, its `commit` line (written just before the commit).
  What it does after that is not counted: a failed attempt's raise, an `end`
  line, and the tail of an attempt that lost its lease. Here is why. A worker
  frozen (SIGSTOP) past its lease is, in its frozen process, still inside its
  handler while another worker legitimately takes the slot (the limit counts
  jobs running in the database, and a rescued job no longer runs). When it
  wakes, the handler stops at its next safe point, having done nothing after
  the last one it passed while its lease was trusted: that safe point is
  where its work ends, as for "two attempts alive at once". A commit that
  failed (its lease was lost) did nothing either. A frozen handler is thus
  counted while its lease was trusted, and not after: what the limit
  promises of handlers that run. (A process paused between the safe point
  and the work it allowed does that work late, which no safe point can
  prevent: docs/explanation/guarantees.md.)
- **steps started before their upstream ended**: a workflow step's attempt
  began before each step it comes after had succeeded (its success commits
  after its `commit` line); or, for a step that runs whatever they did
  (`on_upstream_failure="run"`), while an attempt of one was at work, or
  before one ran again without an operator's retry of the workflow in
  between (an attempt that fails with attempts left ends nothing); or its
  handler read an upstream state its policy forbids.
- **workflows stuck**: a workflow enqueued before the load ended and not
  ended once the deployment drained (the drain waits for them).
- **ends not explained**: a limited job or a step whose end in the database
  the handlers' ledger or a recorded cause does not explain: succeeded
  without its handler's commit, committed but ended otherwise, failed
  without an error text, cancelled without an upstream step that failed or
  was cancelled or an operator's cancel of its workflow (nothing else
  cancels in a chaos run); a workflow whose end does not follow from its
  steps'.
- **starts over a rate limit**: more attempts started (by the handlers' own
  clock) in a window of the limit's period than its rate. Reported always;
  asserted (RATE_ASSERTED): a handler begins within its rate's tolerance of
  its counted start, or is handed back unstarted.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from due.core.limits import Limit

RATE_ASSERTED = True
"""Whether starts over a rate limit must be zero: on since a handler must
begin within its rate's tolerance of its counted start, or be handed back
unstarted (before, a rate counted the claim, and a worker started what it
had claimed ahead later, together: handlers saw 7-10 starts a second under
5/s). The hand-made ledger tests switch it off to see the row reported."""
RATE_TOLERANCE = 0.05
"""Seconds taken off a rate's window: the database's time of a start and the
handler's line of it are a few milliseconds apart."""
FINAL = ("succeeded", "failed", "cancelled")
WORK_KINDS = ("start", "step", "upstream")
"""Lines an attempt writes while it works (a `commit` counts only when it committed)."""

LIMIT_EXCEEDED = "handlers over a concurrency limit"
EARLY_STEPS = "steps started before their upstream ended"
STUCK = "workflows stuck"
UNEXPLAINED = "ends not explained"
RATE_EXCEEDED = "starts over a rate limit"
ASSERTED = (LIMIT_EXCEEDED, EARLY_STEPS, STUCK, UNEXPLAINED)


class LedgerLine(Protocol):
    """A line of the handlers' ledger (verdict.Line)."""

    kind: str
    job: int
    attempt: int
    token: int
    pid: int
    at: float
    run_at: float
    detail: list[str]


@dataclass(frozen=True)
class Action:
    """An operator's call on a workflow: `cancel` or `retry`, and when it was
    made (its commit is between `before` and `after`)."""

    kind: str
    workflow: int
    before: float
    after: float


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job counted against limits, as its handler wrote it."""

    job: int
    token: int
    limits: tuple[tuple[str, str], ...]
    start: float
    end: float
    """Its last unit of work (its start, when it did none)."""


@dataclass
class FlowFindings:
    """The rows above, with examples, and the figures beside them."""

    found: dict[str, list[Any]]
    limit_peaks: dict[str, tuple[int, int]]
    """Per concurrency limit: the most handlers at work at once (any key), its number."""
    rate_peaks: dict[str, tuple[int, int]]
    """Per rate limit: the most starts in one window, its rate."""
    limited_attempts: int
    workflow_states: dict[str, int]
    workflows_settled_after: float | None
    """Seconds from the load's end to the last workflow's end (None: none ended after it)."""
    actions: dict[str, int]
    """The operator's calls on workflows, by kind."""


def judge_flows(
    *,
    ledger: Sequence[LedgerLine],
    jobs: Mapping[int, Mapping[str, Any]],
    successes: Sequence[tuple[int, int, str]],
    edges: Sequence[tuple[int, int]],
    workflows: Mapping[int, Mapping[str, Any]],
    limits: Mapping[str, Limit],
    load_ended: float,
    actions: Sequence[Action] = (),
) -> FlowFindings:
    """`jobs` as verdict.judge takes them, with `workflow`, `policy`, `limited`,
    `last_error` and `error_kinds`; `edges`: (upstream, step) job ids;
    `workflows`: id -> {state, created_at, finished_at}; `actions`: the
    operator's cancels and retries of workflows."""
    committed = {(job, token) for job, token, _ in successes}
    attempts = limited_attempts(ledger, committed)
    found: dict[str, list[Any]] = defaultdict(list)
    limit_peaks = _concurrency(attempts, limits, found[LIMIT_EXCEEDED])
    rate_peaks = _rates(attempts, limits, found[RATE_EXCEEDED])
    found[EARLY_STEPS] = early_steps(ledger, jobs, edges, committed, actions)
    found[STUCK] = stuck_workflows(workflows, jobs, load_ended)
    found[UNEXPLAINED] = unexplained_ends(jobs, workflows, edges, successes, actions)
    ends = [w["finished_at"] for w in workflows.values() if w.get("finished_at") is not None]
    return FlowFindings(
        dict(found),
        limit_peaks,
        rate_peaks,
        len(attempts),
        dict(Counter(str(w["state"]) for w in workflows.values())),
        max(ends) - load_ended if ends and max(ends) > load_ended else None,
        dict(Counter(action.kind for action in actions)),
    )


def limited_attempts(
    ledger: Iterable[LedgerLine], committed: set[tuple[int, int]]
) -> list[Attempt]:
    """Every attempt whose start line names limits, from its start to its last work."""
    by_attempt: dict[tuple[int, int], list[LedgerLine]] = defaultdict(list)
    for line in ledger:
        by_attempt[(line.job, line.token)].append(line)
    attempts = []
    for (job, token), lines in by_attempt.items():
        start = next((line for line in lines if line.kind == "start"), None)
        if start is None:
            continue
        named = tuple(_limit(token_) for token_ in start.detail if token_.startswith("limit:"))
        if not named:
            continue
        work = [line.at for line in lines if line.kind in WORK_KINDS]
        if (job, token) in committed:
            work += [line.at for line in lines if line.kind == "commit"]
        attempts.append(Attempt(job, token, named, start.at, max(work)))
    return attempts


def _limit(text: str) -> tuple[str, str]:
    _, name, key = text.split(":", 2)
    return name, key


def _by_key(attempts: Iterable[Attempt]) -> dict[tuple[str, str], list[Attempt]]:
    grouped: dict[tuple[str, str], list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        for pair in attempt.limits:
            grouped[pair].append(attempt)
    return grouped


def _concurrency(
    attempts: list[Attempt], limits: Mapping[str, Limit], found: list[Any]
) -> dict[str, tuple[int, int]]:
    """The most attempts at work at once per limit and key (at each start: those
    begun by then and not yet done, itself included); each start over the
    limit is a finding."""
    peaks: dict[str, tuple[int, int]] = {}
    for (name, key), group in sorted(_by_key(attempts).items()):
        limit = limits.get(name)
        if limit is None or limit.concurrency is None:
            continue
        ends: list[tuple[float, int]] = []
        peak = 0
        for attempt in sorted(group, key=lambda a: (a.start, a.end)):
            while ends and ends[0][0] <= attempt.start:
                heapq.heappop(ends)
            heapq.heappush(ends, (attempt.end, attempt.job))
            peak = max(peak, len(ends))
            if len(ends) > limit.concurrency:
                found.append((name, key, round(attempt.start, 3), sorted(j for _, j in ends)))
        peaks[name] = (max(peak, peaks.get(name, (0, 0))[0]), limit.concurrency)
    return peaks


def _rates(
    attempts: list[Attempt], limits: Mapping[str, Limit], found: list[Any]
) -> dict[str, tuple[int, int]]:
    """The most starts in one window of each rate's period (less the tolerance)."""
    peaks: dict[str, tuple[int, int]] = {}
    for (name, key), group in sorted(_by_key(attempts).items()):
        limit = limits.get(name)
        if limit is None or limit.rate is None or limit.period is None:
            continue
        window = limit.period - RATE_TOLERANCE
        starts = sorted(attempt.start for attempt in group)
        peak, last = 0, 0
        for first, at in enumerate(starts):
            while last < len(starts) and starts[last] < at + window:
                last += 1
            peak = max(peak, last - first)
            if last - first > limit.rate:
                found.append((name, key, round(at, 3), last - first))
        peaks[name] = (max(peak, peaks.get(name, (0, 0))[0]), limit.rate)
    return peaks


def early_steps(
    ledger: Iterable[LedgerLine],
    jobs: Mapping[int, Mapping[str, Any]],
    edges: Iterable[tuple[int, int]],
    committed: set[tuple[int, int]],
    actions: Sequence[Action] = (),
) -> list[Any]:
    """Step attempts that began before their upstream steps allowed it: under the
    default policy, before each had succeeded (after its success's commit
    line: the commit, and the release with it, come later); under "run",
    while an attempt of one was at work, or before one ran again without a
    retry of the workflow in between (it had not ended: an attempt that
    fails with attempts left ends nothing). Or whose handler read an upstream
    state its policy forbids."""
    upstream: dict[int, list[int]] = defaultdict(list)
    for up, step in edges:
        upstream[step].append(up)
    lines_of: dict[int, list[LedgerLine]] = defaultdict(list)
    for line in ledger:
        lines_of[line.job].append(line)
    retries: dict[int, list[Action]] = defaultdict(list)
    for action in actions:
        if action.kind == "retry":
            retries[action.workflow].append(action)
    found: list[Any] = []
    for step, ups in upstream.items():
        runs_anyway = jobs.get(step, {}).get("policy") == "run"
        workflow = jobs.get(step, {}).get("workflow", -1)
        for line in lines_of.get(step, []):
            if line.kind == "upstream":
                seen = dict(item.split("=", 1) for item in line.detail)
                allowed = FINAL if runs_anyway else ("succeeded",)
                found += [
                    (step, line.token, name, state)
                    for name, state in seen.items()
                    if state not in allowed
                ]
            if line.kind != "start":
                continue
            for up in ups:
                spans = _spans(lines_of.get(up, []), up, committed)
                if runs_anyway:
                    why = _not_ended(spans, line.at, retries.get(workflow, []))
                else:
                    won = [end for token, (_, end) in spans.items() if (up, token) in committed]
                    why = "before its success" if not won or line.at <= min(won) else None
                if why is not None:
                    found.append((step, line.token, up, why))
    return found


def _spans(
    lines: list[LedgerLine], job: int, committed: set[tuple[int, int]]
) -> dict[int, tuple[float, float]]:
    """Each attempt of a job, by token: from its start to its last work (its
    commit line, for the attempt whose success committed)."""
    spans: dict[int, tuple[float, float]] = {}
    starts = {line.token: line.at for line in lines if line.kind == "start"}
    for token, start in starts.items():
        kinds = (*WORK_KINDS, "commit") if (job, token) in committed else WORK_KINDS
        work = [line.at for line in lines if line.token == token and line.kind in kinds]
        spans[token] = (start, max(work))
    return spans


def _not_ended(
    spans: dict[int, tuple[float, float]], at: float, retries: list[Action]
) -> str | None:
    """Why an upstream step had not ended at `at`, or None."""
    if any(start <= at <= end for start, end in spans.values()):
        return "while it worked"
    later = [start for start, _ in spans.values() if start > at]
    if later and not any(r.before <= min(later) and r.after >= at for r in retries):
        return "before it ran again, without a retry"
    return None


def stuck_workflows(
    workflows: Mapping[int, Mapping[str, Any]],
    jobs: Mapping[int, Mapping[str, Any]],
    load_ended: float,
) -> list[Any]:
    """Workflows enqueued before the load ended and not ended after the drain,
    each with its unfinished steps' states."""
    open_steps: dict[int, list[str]] = defaultdict(list)
    for job in jobs.values():
        if job.get("workflow") is not None and job["state"] not in FINAL:
            open_steps[job["workflow"]].append(job["state"])
    return [
        (workflow, dict(Counter(open_steps.get(workflow, []))))
        for workflow, row in sorted(workflows.items())
        if row["state"] not in FINAL and row["created_at"] <= load_ended
    ]


def unexplained_ends(
    jobs: Mapping[int, Mapping[str, Any]],
    workflows: Mapping[int, Mapping[str, Any]],
    edges: Iterable[tuple[int, int]],
    successes: Sequence[tuple[int, int, str]],
    actions: Sequence[Action] = (),
) -> list[Any]:
    """Ends of limited jobs, steps and workflows that nothing recorded explains."""
    cancelled_by_hand = {action.workflow for action in actions if action.kind == "cancel"}
    upstream: dict[int, list[int]] = defaultdict(list)
    for up, step in edges:
        upstream[step].append(up)
    commits = Counter(job for job, _, _ in successes)
    found: list[Any] = []
    for job_id, job in jobs.items():
        if job.get("workflow") is None and not job.get("limited"):
            continue
        state = job["state"]
        if state == "succeeded" and not commits[job_id]:
            found.append((job_id, "succeeded without its handler's commit"))
        elif commits[job_id] and state != "succeeded":
            found.append((job_id, f"its handler's commit is recorded, it ended {state}"))
        elif state == "failed" and not job.get("last_error"):
            found.append((job_id, "failed without an error"))
        elif state == "cancelled":
            ups = [jobs.get(up, {}).get("state") for up in upstream.get(job_id, [])]
            by_policy = (
                job.get("policy") != "run"
                and "cancelled" in job.get("error_kinds", [])
                and any(s in ("failed", "cancelled") for s in ups)
            )
            if job.get("workflow") is None or not (
                by_policy or job["workflow"] in cancelled_by_hand
            ):
                found.append((job_id, f"cancelled without a cause (upstream: {ups})"))
    steps: dict[int, list[str]] = defaultdict(list)
    for job in jobs.values():
        if job.get("workflow") is not None:
            steps[job["workflow"]].append(job["state"])
    for workflow, row in sorted(workflows.items()):
        if row["state"] not in FINAL:
            continue  # stuck, or still running (it then counts there)
        expected = _workflow_end(steps.get(workflow, []))
        if row["state"] != expected:
            found.append((workflow, f"workflow ended {row['state']}, its steps say {expected}"))
    return found


def _workflow_end(states: list[str]) -> str:
    if any(state not in FINAL for state in states) or not states:
        return "running"
    if "failed" in states:
        return "failed"
    if "cancelled" in states:
        return "cancelled"
    return "succeeded"
