"""The dashboard's workflows: over HTTP on both backends, the list of recent
workflows and a workflow's page (its graph as SVG, laid out by depth, each
step a link to its job; its steps below; names escaped); then in a real
headless Chromium over a real `due dashboard` process and a real worker, the
graph follows the steps' states live, and a step's job page links back."""

# The browser's fixtures come from test_dashboard_browser (imported: F401), and
# the tests name them as parameters (F811).
# ruff: noqa: F811

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import due
from due.core.jobs import JobState
from due.core.records import ClaimRequest, Completion
from tests.helpers.waiting import wait_until
from tests.helpers.workers import WorkerProcess
from tests.web.test_dashboard_browser import (  # noqa: F401
    Page,
    browser,
    dashboard,
    page,
    shot,
    submit,
    worker,
)

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def client(app: due.App) -> Iterator[TestClient]:
    with TestClient(app.dashboard(), base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
def step(app: due.App) -> due.Task:
    @app.task(name="step")
    def run(n: int) -> int:
        return n

    return run


def nodes(page: str) -> dict[str, tuple[str, int, str]]:
    """Each drawn step: its state, layer and link."""
    found = re.findall(
        r'<a class="node state-(\w+)" href="([^"]+)" data-step="([^"]+)" '
        r'data-state="\w+" data-layer="(\d+)">',
        page,
    )
    return {html.unescape(name): (state, int(layer), link) for state, link, name, layer in found}


def test_a_workflows_page_draws_its_graph_by_depth(
    app: due.App, step: due.Task, client: TestClient
) -> None:
    flow = app.workflow("month-end")
    rates = flow.add(step.request(1), name="rates")
    invoices = flow.add(step.request(2), name="invoices")
    mails = flow.add(step.request(3), name="mails", after=[rates])
    report = flow.add(step.request(4), name=HOSTILE, after=[mails, invoices])
    handle = flow.enqueue()
    (claimed,) = app.store.job_claim(ClaimRequest("default", 1, "w", 30))
    completion = Completion(claimed.id, claimed.lease_token, JobState.SUCCEEDED, result="1")
    completion.settles = True
    app.store.job_complete([completion])
    page = client.get(f"/workflows/{handle.id}").text
    assert HOSTILE not in page
    drawn = nodes(page)
    assert drawn == {
        "rates": ("succeeded", 0, f"/jobs/{rates.job_id}"),
        "invoices": ("queued", 0, f"/jobs/{invoices.job_id}"),
        "mails": ("queued", 1, f"/jobs/{mails.job_id}"),
        HOSTILE: ("waiting", 2, f"/jobs/{report.job_id}"),  # the longest path: 2 steps
    }
    edges = re.findall(r'data-from="([^"]+)" data-to="([^"]+)"', page)
    assert sorted((html.unescape(a), html.unescape(b)) for a, b in edges) == sorted(
        [("rates", "mails"), ("mails", HOSTILE), ("invoices", HOSTILE)]
    )
    assert 'hx-trigger="every 2s"' in page  # live while it runs
    assert f'<tr data-step="{html.escape(HOSTILE)}">' in page.replace("&#34;", '"')
    listed = client.get("/workflows").text
    assert f'<tr data-workflow="{handle.id}">' in listed and "1 of 4" in listed
    job_page = client.get(f"/jobs/{mails.job_id}").text
    assert f'href="/workflows/{handle.id}"' in job_page and "step mails" in job_page
    assert client.get("/workflows/424242").status_code == 404


def test_a_wide_workflow_stays_in_few_layers(
    app: due.App, step: due.Task, client: TestClient
) -> None:
    handle = app.group([step.request(n) for n in range(300)], then=step.request(0), name="wide")
    page = client.get(f"/workflows/{handle.id}").text
    drawn = nodes(page)
    assert len(drawn) == 301 and drawn["then"][1] == 1
    assert {layer for name, (_, layer, _) in drawn.items() if name != "then"} == {0}
    ended = app.cancel_workflow(handle.id)
    assert ended.state == "cancelled"
    page = client.get(f"/workflows/{handle.id}").text
    assert "hx-trigger" not in page  # an ended workflow does not refresh


# --- in a real browser ----------------------------------------------------------------


@pytest.fixture
def browser_app(backend_url: str) -> Iterator[due.App]:
    from tests.apps import dashboard_app
    from tests.helpers.workers import app_with_tasks_of

    application = app_with_tasks_of(backend_url, dashboard_app.app)
    yield application
    application.close()


@pytest.mark.slow
def test_the_graph_follows_the_steps_live_in_a_browser(
    browser_app: due.App,
    worker: WorkerProcess,
    dashboard: str,
    page: Page,
    tmp_path: Path,
) -> None:
    app = browser_app
    tick, slow = app.tasks.get("tick"), app.tasks.get("count_slowly")
    flow = app.workflow("nightly")
    first = flow.add(tick.request(), name="extract")
    counting = flow.add(slow.request(steps=60, pause=0.05), name="transform", after=[first])
    flow.add(tick.request(), name="load", after=[counting])
    handle = flow.enqueue()
    page.goto(f"{dashboard}/workflows/{handle.id}")
    graph = page.locator("#workflow-graph")
    graph.wait_for(timeout=10_000)
    # The page refreshes itself: no reload, and the nodes change state.
    page.locator('a.node[data-step="transform"][data-state="running"]').wait_for(timeout=20_000)
    shot(page, "workflow", tmp_path)
    page.locator('a.node[data-step="load"][data-state="succeeded"]').wait_for(timeout=30_000)
    assert "succeeded" in page.locator("h1").inner_text()
    with page.expect_navigation(wait_until="load"):
        page.locator('a.node[data-step="transform"]').click()
    assert page.url.endswith(f"/jobs/{counting.job_id}")
    with page.expect_navigation(wait_until="load"):
        page.locator("#job-workflow").click()
    assert page.url.endswith(f"/workflows/{handle.id}")
    page.goto(f"{dashboard}/workflows")
    page.locator(f'tr[data-workflow="{handle.id}"]').wait_for(timeout=10_000)
    assert "3 of 3" in page.locator(f'tr[data-workflow="{handle.id}"]').inner_text()


@pytest.mark.slow
def test_cancel_and_retry_a_workflow_from_its_page(
    browser_app: due.App, dashboard: str, page: Page
) -> None:
    app = browser_app
    tick = app.tasks.get("tick")
    handle = app.chain(tick.request(), tick.request(), name="by-hand")
    page.goto(f"{dashboard}/workflows/{handle.id}")
    submit(page, page.get_by_role("button", name="Cancel workflow"))
    wait_until(lambda: app.workflow_status(handle.id).state == "cancelled", what="the cancel")
    assert page.locator('a.node[data-state="cancelled"]').count() == 2
    submit(page, page.get_by_role("button", name="Retry failed steps"))
    status = app.workflow_status(handle.id)
    assert status.state == "running"
    assert [s.state for s in status.steps.values()] == [JobState.QUEUED, JobState.WAITING]
    assert wait_until(lambda: page.locator('a.node[data-state="waiting"]').count() == 1)
