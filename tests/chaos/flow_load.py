"""The chaos load's flow control, beside the plain mix: jobs under limits, and
workflows an operator now and then cancels, or retries after a fix.

Each tick of the load may enqueue: a job under a concurrency limit and a
per-key one (about 2 a second; its key one of three accounts, or a new one),
a burst of 8 jobs under a 5/s rate (about 4 a second in all), a chain of three
steps, or a fan-out/fan-in (a step, 2 to 6 steps after it, one of them under
the limits, then `join`, cancelled if one of them failed, and `audit`, run
whatever they did) — each about one every two seconds. A step fails for good
now and then (`chaos.doomed`), until its workflow is fixed: an operator's
retry writes the workflow's load number to the fixes file first (its doomed
steps then succeed), as a deploy would.

The operator's actions are recorded here, before and after each call: the
verdict explains a cancelled step by them, and a step released again by a
retry.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import due
from tests.chaos import chaos_app
from tests.chaos.flow_verdict import Action

DOOMED_SHARE = 0.1
"""How often a workflow's step fails for good (the steps after it follow their policy)."""
NEW_KEY_SHARE = 0.2
"""How often a limited job's account (its per-key limit's key) is a new one."""
CANCEL_SHARE = 0.006
RETRY_SHARE = 0.012
"""Per tick (up to 40 a second): an operator cancels the newest workflow, or
retries a recent one that failed or was cancelled."""


@dataclass
class FlowLoad:
    app: due.App
    tasks: dict[str, Any]
    rng: random.Random
    fixes: Path
    """Load numbers whose doomed steps now succeed (read by chaos.doomed)."""
    actions: list[Action] = field(default_factory=list)
    enqueued: list[tuple[float, int, int]] = field(default_factory=list)
    """(when, workflow id, load number) of each workflow enqueued."""

    def tick(self, number: int) -> None:
        roll = self.rng.random()
        key = f"chaos-flow:{number}"
        if roll < 0.05:
            account = self._account(number)
            count = self.rng.randint(2, 12)
            self.tasks["limited"].options(key=key).enqueue(number, account, count)
        elif roll < 0.0625:
            rated = self.tasks["rated"]
            self.app.enqueue_many(
                [rated.options(key=f"{key}:{i}").request(number) for i in range(8)]
            )
        elif roll < 0.075:
            self._chain(number)
        elif roll < 0.0875:
            self._fan(number)
        elif roll < 0.0875 + CANCEL_SHARE:
            self._cancel()
        elif roll < 0.0875 + CANCEL_SHARE + RETRY_SHARE:
            self._retry()

    def _account(self, number: int) -> str:
        """One of a few busy accounts, or now and then a new one (a limit key the
        claims must create)."""
        if self.rng.random() < NEW_KEY_SHARE:
            return f"new{number}"
        return self.rng.choice(chaos_app.ACCOUNTS)

    def _step(self, number: int) -> Any:
        if self.rng.random() < DOOMED_SHARE:
            return self.tasks["doomed"].request(number)
        return self.tasks["step"].request(number, self.rng.randint(1, 4))

    def _chain(self, number: int) -> None:
        """Three steps, each after the one before (a failure cancels the rest)."""
        steps = [self._step(number) for _ in range(3)]
        handle = self.app.chain(*steps, name=f"chaos-chain-{number}")
        self.enqueued.append((time.time(), handle.id, number))

    def _fan(self, number: int) -> None:
        flow = self.app.workflow(f"chaos-fan-{number}")
        split = flow.add(self.tasks["step"].request(number, 1), name="split")
        members = [
            flow.add(self._step(number), name=f"m{i}", after=[split])
            for i in range(self.rng.randint(1, 5))
        ]
        limited = self.tasks["limited"].request(number, self._account(number), 2)
        members.append(flow.add(limited, name="limited", after=[split]))
        flow.add(self.tasks["step"].request(number, 1), name="join", after=members)
        audit = self.tasks["step"].request(number, 1)
        flow.add(audit, name="audit", after=members, on_upstream_failure="run")
        handle = flow.enqueue()
        self.enqueued.append((time.time(), handle.id, number))

    def _cancel(self) -> None:
        """The newest workflow (most likely running)."""
        if self.enqueued:
            _, workflow, _ = self.enqueued[-1]
            self._act("cancel", workflow, lambda: self.app.cancel_workflow(workflow, by="chaos"))

    def _retry(self) -> None:
        """A recent workflow that failed or was cancelled, fixed first."""
        numbers = {workflow: number for _, workflow, number in self.enqueued}
        ended = [
            w.id
            for w in self.app.workflows(limit=20)
            if w.state in ("failed", "cancelled") and w.id in numbers
        ]
        if not ended:
            return
        workflow = self.rng.choice(ended)
        with self.fixes.open("a") as fixes:  # the fix first, then the retry
            fixes.write(f"{numbers[workflow]}\n")
        self._act("retry", workflow, lambda: self.app.retry_workflow(workflow, by="chaos"))

    def _act(self, kind: str, workflow: int, call: Any) -> None:
        before = time.time()
        try:
            call()
        finally:  # (an outage may have cut it after its commit: recorded all the same)
            self.actions.append(Action(kind, workflow, before, time.time()))
