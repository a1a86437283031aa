"""The dashboard's limits, over HTTP on both backends: the overview lists each
limit with its figures (an operator's numbers marked), a job's page says what
limits it counts against and why it waits, and names from jobs are escaped."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

import due
from due.core.records import ClaimRequest

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def client(app: due.App) -> Iterator[TestClient]:
    with TestClient(app.dashboard(), base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
def jobs(app: due.App) -> dict[str, due.Job]:
    """A charge waiting for stripe's rate, a sync waiting for its key, one running."""
    app.limit("stripe", rate="1/s")
    app.limit("account-sync", concurrency=1)

    @app.task(name="charge", limits=["stripe"])
    def charge(n: int) -> None: ...

    @app.task(name="sync", limits={"account-sync": lambda account: account})
    def sync(account: str) -> None: ...

    app.sync_limits()
    started, charge_waits = charge.enqueue(0), charge.enqueue(1)
    sync.enqueue(HOSTILE)
    sync_waits = sync.enqueue(HOSTILE)
    app.store.job_claim(ClaimRequest("default", 10, "w", 600, limited=True))
    return {"started": started, "charge": charge_waits, "sync": sync_waits}


def row(page: str, limit: str) -> str:
    found = re.search(rf'<tr data-limit="{re.escape(limit)}">(.*?)</tr>', page, re.DOTALL)
    assert found, f"no row for limit {limit!r}"
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())


def test_the_overview_lists_each_limit_with_its_figures(
    app: due.App, jobs: dict[str, due.Job], client: TestClient
) -> None:
    page = client.get("/").text
    assert "<h2>Limits</h2>" in page
    assert row(page, "stripe") == "stripe — 1/s 1 1 of 1 1"
    keys = html.escape(HOSTILE, quote=False)
    assert f"{keys} (1 running, 1 waiting)" in page.replace("&#39;", "'")
    assert HOSTILE not in page
    app.set_limit("stripe", rate="10/m")
    assert row(client.get("/").text, "stripe").startswith("stripe set by operator — 10/m")


def test_no_limits_section_without_a_stored_limit(app: due.App, client: TestClient) -> None:
    assert "<h2>Limits</h2>" not in client.get("/").text


def test_a_jobs_page_says_its_limits_and_why_it_waits(
    jobs: dict[str, due.Job], client: TestClient
) -> None:
    page = html.unescape(client.get(f"/jobs/{jobs['charge'].id}").text)
    assert "<dt>limits</dt><dd>stripe</dd>" in page
    assert "waiting for limit stripe: 1 start in the last 1s" in page
    page = client.get(f"/jobs/{jobs['sync'].id}").text
    assert HOSTILE not in page
    assert (
        f"waiting for limit account-sync (key {html.escape(HOSTILE, quote=False)}): "
        "1 of 1 running" in page.replace("&#39;", "'")
    )
    page = client.get(f"/jobs/{jobs['started'].id}").text  # running: it waits for nothing
    assert "limit wait" not in page and "<dt>limits</dt>" in page
