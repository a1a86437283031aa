"""The app the dashboard's browser tests run in a real worker and a real dashboard."""

from __future__ import annotations

import time
from pathlib import Path

import due

app = due.App()  # DUE_DATABASE_URL


@app.task(name="count_slowly")
def count_slowly(ctx: due.Context, steps: int, pause: float = 0.1) -> int:
    """Reports its progress at every step (a safe point: a cancel stops it there)."""
    for step in range(1, steps + 1):
        time.sleep(pause)
        ctx.progress(step, steps, f"step {step} of {steps}")
    return steps


@app.task(name="fails_until_retried", retry=due.Retry(max_attempts=1))
def fails_until_retried(marker: str) -> str:
    """Fails the first time (leaving `marker` behind), succeeds once retried."""
    path = Path(marker)
    if not path.exists():
        path.write_text("failed once")
        raise RuntimeError("the export server said no")
    return "exported"


@app.task(name="tick")
def tick() -> str:
    return "ticked"
