"""The dashboard in a real headless Chromium, over a real `due dashboard` process
and a real worker: pages load without a script error or a blocked resource,
a running job's progress bar advances, and the actions do what they say."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, sync_playwright

import due
from tests.helpers.ports import free_port
from tests.helpers.tools import need
from tests.helpers.waiting import holds_for, wait_until
from tests.helpers.workers import REPOSITORY, WorkerProcess, Workers, app_with_tasks_of

pytestmark = pytest.mark.slow
APP = "tests.apps.dashboard_app:app"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = REPOSITORY / "docs" / "screenshots"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    need("chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def app(backend_url: str) -> Iterator[due.App]:
    from tests.apps import dashboard_app

    application = app_with_tasks_of(backend_url, dashboard_app.app)
    yield application
    application.close()


@pytest.fixture
def worker(workers: Workers) -> WorkerProcess:
    started = workers.start("--grace", "2s", app=APP)
    workers.wait_ready(started)
    return started


@pytest.fixture
def dashboard(backend_url: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = tmp_path / "dashboard.log"
    environment = {
        **os.environ,
        "DUE_DATABASE_URL": backend_url,
        "PYTHONPATH": f"{REPOSITORY}{os.pathsep}{REPOSITORY / 'src'}",
    }
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "due", "--app", APP, "dashboard", "--port", str(port)],
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPOSITORY,
        )
    try:
        wait_until(
            lambda: "dashboard on http://" in log.read_text() or process.poll() is not None,
            what="the dashboard to listen",
        )
        assert process.poll() is None, log.read_text()
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0, log.read_text()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    opened.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type == "error"
            else None
        ),
    )
    opened.on("dialog", lambda dialog: dialog.accept())
    opened.problems = problems  # type: ignore[attr-defined]
    yield opened
    context.close()
    # A Content-Security-Policy violation, a missing file or a script error shows here.
    assert problems == []


def shot(page: Page, name: str, tmp_path: Path) -> None:
    """Screenshots for the README, refreshed with DUE_WRITE_SCREENSHOTS=1."""
    folder = SCREENSHOTS if os.environ.get("DUE_WRITE_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    assert (folder / f"{name}.png").stat().st_size > 10_000


def submit(page: Page, button: Locator) -> None:
    """Click a form's button and wait for the page it leads to (POST, then the
    redirect back): the next step never races the navigation."""
    with page.expect_navigation(wait_until="load"):
        button.click()


def progress_of(page: Page) -> float:
    value = page.locator("#job-progress").get_attribute("value", timeout=10_000)
    return float(value or 0)


def test_every_page_loads_and_a_running_job_shows_its_progress_then_cancels(
    app: due.App, worker: WorkerProcess, dashboard: str, page: Page, tmp_path: Path, backend: str
) -> None:
    app.add_schedule("nightly-report", "0 2 * * *", task="tick", tz="Europe/Paris")
    finished = app.enqueue("tick")
    app.wait(finished.id, timeout=30)
    job = app.enqueue("count_slowly", kwargs={"steps": 400, "pause": 0.05})
    for path, seen in (
        ("/", 'tr[data-queue="default"]'),
        ("/jobs", f'tr[data-job="{finished.id}"]'),
        ("/schedules", 'section[data-schedule="nightly-report"]'),
        ("/workers", "tr[data-worker]"),
    ):
        page.goto(dashboard + path)
        assert page.locator(seen).count() >= 1, path
    page.goto(f"{dashboard}/jobs/{job.id}")
    first = wait_until(lambda: progress_of(page) > 0 and progress_of(page), what="progress")
    later = wait_until(lambda: (p := progress_of(page)) > first and p, what="the bar to advance")
    assert later > first  # the page refreshed itself: no reload was asked for
    assert "step " in page.locator(".progress-message").inner_text()
    if backend == "sqlite":
        shot(page, "job", tmp_path)
    submit(page, page.get_by_role("button", name="Cancel"))
    wait_until(lambda: "cancelled" in page.locator("h1 .state").inner_text(), what="cancelled")
    ended = app.get(job.id)
    assert ended.state == due.JobState.CANCELLED and ended.result is None
    page.goto(dashboard + "/")
    if backend == "sqlite":
        shot(page, "overview", tmp_path)
        page.goto(dashboard + "/schedules")
        shot(page, "schedules", tmp_path)


def test_retry_a_failed_job_from_its_page(
    app: due.App, worker: WorkerProcess, dashboard: str, page: Page, tmp_path: Path
) -> None:
    job = app.enqueue("fails_until_retried", args=[str(tmp_path / "marker")])
    failed = app.wait(job.id, timeout=30)
    assert failed.state == due.JobState.FAILED
    page.goto(f"{dashboard}/jobs/{job.id}")
    assert "the export server said no" in page.locator(".history").inner_text()
    submit(page, page.get_by_role("button", name="Retry"))
    wait_until(lambda: app.get(job.id).state == due.JobState.SUCCEEDED, what="the retry")
    page.goto(f"{dashboard}/jobs/{job.id}")
    assert "retry by" in page.locator(".history").inner_text()


def test_pause_a_queue_and_claims_stop_until_resumed(
    app: due.App, worker: WorkerProcess, dashboard: str, page: Page
) -> None:
    page.goto(dashboard + "/")
    row = page.locator('tr[data-queue="default"]')
    submit(page, row.get_by_role("button", name="Pause"))
    page.locator('tr[data-queue="default"] .badge.paused').wait_for(timeout=10_000)
    job = app.enqueue("tick")
    holds_for(lambda: app.get(job.id).state == due.JobState.QUEUED, 1.5, what="the pause")
    submit(page, page.locator('tr[data-queue="default"]').get_by_role("button", name="Resume"))
    wait_until(lambda: app.get(job.id).state == due.JobState.SUCCEEDED, what="the job to run")


def test_trigger_a_schedule_now(
    app: due.App, worker: WorkerProcess, dashboard: str, page: Page
) -> None:
    app.add_schedule("yearly", "0 0 1 1 *", task="tick")
    page.goto(dashboard + "/schedules")
    section = page.locator('section[data-schedule="yearly"]')
    submit(page, section.get_by_role("button", name="Run now"))
    runs = wait_until(lambda: app.jobs(task="tick"), what="the triggered run")
    assert runs[0].schedule == "yearly"
    wait_until(lambda: app.get(runs[0].id).state == due.JobState.SUCCEEDED, what="the run")
    page.goto(dashboard + "/schedules")
    assert "trigger by" in section.inner_text()
