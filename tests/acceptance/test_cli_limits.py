"""`due limit`, `due limit set|reset`, and what `due show` and `due status` say of
limits, run as a user runs them (in a subprocess), on both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import due
from due.core.records import ClaimRequest
from tests.helpers.cli import run_due


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    """Two limits, each full: two charges started against stripe's 2/h (a third
    waits), one sync of acct-7 running (a second waits for the key)."""
    application = due.App(backend_url)
    application.migrate()
    application.limit("stripe", rate="2/h")
    application.limit("account-sync", concurrency=1)

    @application.task(name="charge", limits=["stripe"])
    def charge(n: int) -> None: ...

    @application.task(name="sync", limits={"account-sync": lambda account: account})
    def sync(account: str) -> None: ...

    application.sync_limits()
    for n in range(3):
        charge.enqueue(n)
    sync.enqueue("acct-7"), sync.enqueue("acct-7")
    claim(application)
    yield application
    application.close()


def claim(app: due.App) -> list[due.Job]:
    return app.store.job_claim(ClaimRequest("default", 10, "w", 600, limited=True))  # type: ignore[return-value]


def waiting_for(app: due.App, limit: str) -> due.Job:
    (job,) = [job for job in app.jobs(state="queued") if job.limit_wait == limit]
    return job


def test_the_limits_with_their_figures_and_a_waiting_jobs_reason(
    app: due.App, backend_url: str
) -> None:
    listed = run_due(backend_url, "limit")
    assert "stripe" in listed and "2/h" in listed and "2 of 2 in 1h" in listed
    assert "acct-7 (1 running, 1 waiting)" in listed and "operator" not in listed
    shown = run_due(backend_url, "show", str(waiting_for(app, "stripe").id))
    assert "limits" in shown and "waiting for limit stripe: 2 starts in the last 1h" in shown
    shown = run_due(backend_url, "show", str(waiting_for(app, "account-sync").id))
    assert "account-sync (key acct-7)" in shown
    assert "waiting for limit account-sync (key acct-7): 1 of 1 running" in shown
    status = run_due(backend_url, "status")
    assert "starts in window" in status and "2 of 2 in 1h" in status
    document = json.loads(run_due(backend_url, "limit", "--json"))
    stripe = next(limit for limit in document["limits"] if limit["name"] == "stripe")
    assert (stripe["rate"], stripe["running"], stripe["waiting"]) == ("2/h", 2, 1)
    assert json.loads(run_due(backend_url, "status", "--json"))["limits"] == document["limits"]


def test_an_operator_sets_numbers_that_claims_obey_until_reset(
    app: due.App, backend_url: str
) -> None:
    said = run_due(backend_url, "limit", "set", "account-sync", "--concurrency", "2")
    assert "limit 'account-sync' set to concurrency 2" in said
    assert len(claim(app)) == 1  # the next claim obeys: the waiting sync starts
    said = run_due(backend_url, "limit", "set", "stripe", "--rate", "50/s")
    assert "set to rate 50/s" in said
    listed = run_due(backend_url, "limit")
    assert "operator (code: rate 2/h)" in listed and "operator (code: concurrency 1)" in listed
    said = run_due(backend_url, "limit", "reset", "stripe")
    assert "limit 'stripe' is back to the code's numbers: rate 2/h" in said
    (stripe,) = [o for o in app.limit_overview() if o.name == "stripe"]
    assert not stripe.overridden and stripe.limit.rate_text == "2/h"


def test_a_number_not_given_keeps_the_one_in_force(app: due.App, backend_url: str) -> None:
    app.set_limit("stripe", rate="2/h", concurrency=5)
    run_due(backend_url, "limit", "set", "stripe", "--rate", "10/m")
    (stripe,) = [o for o in app.limit_overview() if o.name == "stripe"]
    assert (stripe.limit.concurrency, stripe.limit.rate_text) == (5, "10/m")


def test_mistakes_get_a_clear_message(app: due.App, backend_url: str) -> None:
    out = run_due(backend_url, "limit", "set", "nope", "--rate", "5/s", expect=1)
    assert "error: no limit 'nope' is stored (stored: account-sync, stripe)" in out
    assert "Traceback" not in out
    out = run_due(backend_url, "limit", "set", "stripe", "--rate", "fast", expect=1)
    assert "error: limit 'stripe': rate='fast' must be written N/period" in out
    out = run_due(backend_url, "limit", "set", "stripe", "--concurrency", "0", expect=1)
    assert "concurrency=0 must be a whole number from 1" in out
    out = run_due(backend_url, "limit", "set", "stripe", expect=2)
    assert "give --rate (like 50/s), --concurrency N, or both" in out
    out = run_due(backend_url, "limit", "reset", "nope", expect=1)
    assert "error: no limit 'nope' is stored" in out
