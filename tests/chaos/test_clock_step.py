"""The chaos suite's clock step, briefly: a running worker's wall clock steps an
hour ahead and back while the deployment works (issue 35, hole 5).

On PostgreSQL the database's clock decides: nothing a step does may show in
the verdict, the stepped worker (the first leader) keeps running jobs, and it
keeps its pace: before the fix its scheduler and producers, finding every time
within the hour past, sent two to three times the statements after a step
(tests/integration/test_clock_steps.py counts them on an idle worker).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import run
from tests.helpers.tools import need

pytestmark = pytest.mark.slow
SECONDS = 16.0
RATE = 0.3


@pytest.mark.timeout(240)
def test_a_worker_whose_wall_clock_steps_keeps_its_pace_and_its_promises(
    postgres_url: str, tmp_path: Path
) -> None:
    need("faketime")
    verdict = run(
        "postgres", postgres_url, tmp_path, seconds=SECONDS, rate=RATE, kinds=["clock_step"], seed=3
    )
    print(verdict.table())
    assert verdict.ok(), verdict.table()
    assert verdict.faults["clock_step"] >= 2 and verdict.step_pace, verdict.table()
    assert verdict.stepped_executions > 0, verdict.table()
    for _, step, before, after in verdict.step_pace:
        assert after <= 2 * before + 20, (step, before, after)
