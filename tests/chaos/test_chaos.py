"""The short chaos run of `make test`: both stores, under a minute each
(plain jobs, and beside them jobs under limits and workflows). On PostgreSQL
it runs on a cluster of its own (the `private_postgres` fixture), which its
faults restart and whose sessions they end: never the machine's shared server.

Its load lasts 20 seconds, and goes on until every kind of fault has landed
and the worker an hour ahead has had its chance (run.py's OVERTIME at most):
on a loaded machine workers start late and faults find fewer targets, and a
run that did not do those things would prove less than it says.

`make chaos` runs the full one (`tests/chaos/run.py`: longer, more faults);
docs/explanation/guarantees.md carries its figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.faults import POSTGRES_FAULTS, SQLITE_FAULTS
from tests.chaos.run import run
from tests.helpers.private_postgres import PrivatePostgres
from tests.helpers.tools import need

# serial: four workers, faults and a load take the machine's two cores; run beside
# other tests, both would slow down. (Its PostgreSQL is its own: see above.)
pytestmark = [pytest.mark.slow, pytest.mark.serial]
SECONDS = 20.0
RATE = 0.6


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_deployment_under_faults_loses_nothing_and_runs_nothing_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    need("faketime")  # one worker runs with its clock an hour off
    server: PrivatePostgres | None = None
    if backend == "postgres":
        server = request.getfixturevalue("private_postgres")
    url = f"sqlite:///{tmp_path / 'chaos.db'}" if server is None else server.url()
    verdict = run(backend, url, tmp_path, seconds=SECONDS, rate=RATE, seed=7, server=server)
    print(verdict.table())
    assert verdict.ok(), verdict.table()
    # The run did real work: the load enqueues about 40 jobs a second but waits
    # out each outage (a frozen proxy, a restarted server), so a loaded machine
    # makes far fewer (278 in one CI run, against 300 asked then).
    assert verdict.completed > 150 and sum(verdict.faults.values()) >= 5, verdict.table()
    assert verdict.due > 0 and verdict.executions >= verdict.completed
    # Limits and workflows ran beside: the pool's limit was reached (so its row
    # judged something), and workflows ended.
    flows = verdict.flows
    assert flows is not None and flows.limit_peaks["chaos-pool"] == (2, 2), verdict.table()
    assert sum(flows.workflow_states.values()) > 0, verdict.table()
    # Every kind of fault landed (the load went on until they had).
    kinds = POSTGRES_FAULTS if backend == "postgres" else SQLITE_FAULTS
    assert set(verdict.faults) >= set(kinds), verdict.table()
    if backend == "postgres":  # the database's clock decides: an hour off changes nothing
        assert verdict.skewed_refusals == 0 and verdict.skewed_executions > 0, verdict.table()
    else:  # the host's clock decides: a process whose clock is off refuses to start
        assert verdict.skewed_refusals > 0 and verdict.skewed_executions == 0, verdict.table()
