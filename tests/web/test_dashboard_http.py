"""The dashboard over HTTP, on both backends: every page renders, every action
needs its CSRF token (and the credential when one is set), values from jobs
are escaped everywhere, and the headers keep browsers from doing harm."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
from fastapi import Depends, FastAPI, HTTPException, Request
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import due
from due.clock import FakeClock
from due.core.records import COUNT_LIMIT, ClaimRequest, Completion, Lease, WorkerRegistration
from due.web.security import Credential

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def work(app: due.App) -> due.Task:
    @app.task(name="work", queue="emails", retry=due.Retry(max_attempts=1))
    def work(value: str = "") -> None: ...

    return work


@pytest.fixture
def client(app: due.App) -> Iterator[TestClient]:
    with TestClient(app.dashboard(), base_url="http://127.0.0.1") as client:
        yield client


def csrf_of(client: TestClient, path: str = "/") -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def claim_one(app: due.App, queue: str = "emails") -> due.Job:
    (claimed,) = app.store.job_claim(ClaimRequest(queue, 1, "web-1:1:a", 30))
    return claimed  # type: ignore[no-any-return]


def fail(app: due.App, claimed: due.Job, message: str) -> None:
    error = due.AttemptError(claimed.attempt, message, None, app.store.now())
    completion = Completion(claimed.id, claimed.lease_token, due.JobState.FAILED, error=error)  # type: ignore[attr-defined]
    app.store.job_complete([completion])


def test_every_page_renders(app: due.App, work: due.Task, client: TestClient) -> None:
    job = work.enqueue("hello")
    app.add_schedule("nightly", "0 2 * * *", task=work)
    app.store.worker_register(WorkerRegistration("web-1:1:a", "web-1", 1, {"emails": 4}))
    overview = client.get("/")
    assert overview.status_code == 200 and 'data-queue="emails"' in overview.text
    assert "emails" in client.get("/jobs").text
    page = client.get(f"/jobs/{job.id}")
    assert page.status_code == 200 and '"hello"' in page.text.replace("&#34;", '"')
    schedules = client.get("/schedules").text
    assert "At 02:00 AM" in schedules and 'data-schedule="nightly"' in schedules
    assert 'data-worker="web-1:1:a"' in client.get("/workers").text
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and "due_queue_oldest_due_age_seconds" in metrics.text
    assert client.get("/jobs/999999").status_code == 404


def test_the_overview_says_when_a_count_stopped_at_its_limit(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    app.enqueue_many([work.request("x")] * (COUNT_LIMIT + 1))
    page = client.get("/")
    row = re.search(r'<tr data-queue="emails">(.*?)</tr>', page.text, re.S)
    assert row, page.text
    cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
    assert cells[:2] == [f"{COUNT_LIMIT}+", f"{COUNT_LIMIT}+"]  # due now, queued


def test_html_from_jobs_is_escaped_on_every_page(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    job = work.options(key=HOSTILE).enqueue(HOSTILE)
    claimed = claim_one(app)
    progress = json.dumps({"done": 1, "total": 3, "message": HOSTILE})
    app.store.job_heartbeat([Lease(claimed.id, claimed.lease_token, 30, progress)])  # type: ignore[attr-defined]
    other = work.enqueue("x")
    fail(app, claim_one(app), HOSTILE)
    for path in ("/", "/jobs", f"/jobs/{job.id}", f"/jobs/{other.id}", "/jobs?state=failed"):
        body = client.get(path).text
        assert HOSTILE not in body, path
    shown = client.get(f"/jobs/{job.id}").text
    assert shown.count(ESCAPED) >= 3  # the argument, the key and the progress message
    assert ESCAPED in client.get(f"/jobs/{other.id}").text  # the error
    assert ESCAPED in client.get("/jobs").text  # the key in the list


def test_an_action_without_its_csrf_token_is_refused_and_changes_nothing(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    job = work.enqueue()
    refused = client.post(f"/jobs/{job.id}/cancel", data={"csrf": "forged"})
    assert refused.status_code == 403 and "CSRF" in refused.text
    assert client.post(f"/jobs/{job.id}/cancel").status_code == 403
    assert app.get(job.id).state == due.JobState.QUEUED
    token = csrf_of(client, f"/jobs/{job.id}")
    done = client.post(f"/jobs/{job.id}/cancel", data={"csrf": token}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/jobs/{job.id}"
    assert app.get(job.id).state == due.JobState.CANCELLED
    history = app.history(job=job.id)
    assert [entry.action for entry in history] == ["cancel"]
    assert "dashboard" in history[0].by
    assert "cancel by anyone on this host via the dashboard" in client.get(f"/jobs/{job.id}").text


def test_actions_retry_pause_and_trigger(
    app: due.App, work: due.Task, client: TestClient, clock: FakeClock
) -> None:
    job = work.enqueue()
    fail(app, claim_one(app), "boom")
    token = csrf_of(client)
    back = {"csrf": token, "next": f"/jobs/{job.id}"}
    moved = client.post(f"/jobs/{job.id}/retry", data=back, follow_redirects=False)
    assert moved.headers["location"] == f"/jobs/{job.id}"
    assert app.get(job.id).state == due.JobState.QUEUED
    client.post("/queues/pause", data={"csrf": token, "name": "emails"})
    assert {q.name: q.paused for q in app.queues()}["emails"] is True
    assert app.store.job_claim(ClaimRequest("emails", 1, "w", 30)) == []
    assert 'action="/queues/resume"' in client.get("/").text
    client.post("/queues/resume", data={"csrf": token, "name": "emails"})
    assert {q.name: q.paused for q in app.queues()}["emails"] is False
    app.add_schedule("nightly", "0 2 * * *", task=work)
    client.post("/schedules/pause", data={"csrf": token, "name": "nightly"})
    assert "Resume" in client.get("/schedules").text
    client.post("/schedules/resume", data={"csrf": token, "name": "nightly"})
    before = len(app.jobs(task="work", limit=100))
    client.post("/schedules/trigger", data={"csrf": token, "name": "nightly"})
    assert len(app.jobs(task="work", limit=100)) == before + 1
    actions = [entry.action for entry in app.history(schedule="nightly")]
    assert actions == ["pause", "resume", "trigger"]
    assert [entry.action for entry in app.history(queue="emails")] == ["pause", "resume"]


def actions_shown(page: str) -> list[list[str]]:
    """The overview's "Done by hand" rows, newest first: [what, on, by]."""
    table = re.search(r'<table class="actions">.*?</table>', page, re.S)
    if table is None:
        return []
    rows = re.findall(r"<tr>\s*(.*?)</tr>", table.group(0).split("<tbody>")[1], re.S)
    cells = [re.findall(r"<td>(.*?)</td>", row, re.S) for row in rows]
    return [[re.sub(r"<[^>]+>", "", cell) for cell in row[1:]] for row in cells]


def test_the_overview_shows_what_was_done_by_hand_bulk_actions_included(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    assert actions_shown(client.get("/").text) == []  # no section while nothing was done
    job = work.enqueue(value="a")
    app.cancel(job.id, by="ann")
    app.pause_queue("emails", by="bob")
    app.add_schedule("nightly", "0 2 * * *", task=work)
    app.pause_schedule("nightly", by="cy")
    work.enqueue(value="b")
    assert app.cancel_many(task="work", by="dee") == 1  # a bulk action: on no one job or queue
    page = client.get("/").text
    assert actions_shown(page) == [
        ["cancel 1 jobs where task=work", "—", "dee"],
        ["pause", "schedule nightly", "cy"],
        ["pause", "queue emails", "bob"],
        ["cancel", f"job {job.id}", "ann"],
    ]
    assert f'href="/jobs/{job.id}"' in page and 'href="/jobs?queue=emails"' in page
    for n in range(12):
        app.resume_queue("emails", by=f"op-{n}")
    shown = actions_shown(client.get("/").text)
    assert [row[2] for row in shown] == [f"op-{n}" for n in range(11, 1, -1)]  # the latest 10


def test_a_refused_action_says_why(app: due.App, work: due.Task, client: TestClient) -> None:
    job = work.enqueue()
    token = csrf_of(client)
    refused = client.post(f"/jobs/{job.id}/retry", data={"csrf": token})
    assert refused.status_code == 409 and "queued" in refused.text
    assert client.post("/jobs/424242/cancel", data={"csrf": token}).status_code == 404


def test_a_redirect_never_leaves_the_dashboard(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    job = work.enqueue()
    token = csrf_of(client)
    for target in ("https://evil.example/", "//evil.example/x"):
        done = client.post(
            "/queues/pause",
            data={"csrf": token, "name": "emails", "next": target},
            follow_redirects=False,
        )
        assert done.headers["location"] == "/", target
    assert job.id


def test_jobs_page_pages_by_id_without_overlap(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    made = [job.id for job in app.enqueue_many(work.request(str(n)) for n in range(120))]
    seen: list[int] = []
    path = "/jobs?queue=emails"
    while path:
        page = client.get(path).text
        seen.extend(int(n) for n in re.findall(r'data-job="(\d+)"', page))
        older = re.search(r'class="older" href="([^"]+)"', page)
        path = older.group(1).replace("&amp;", "&") if older else ""
    assert seen == sorted(made, reverse=True)
    assert (
        client.get(f"/jobs?q={made[3]}", follow_redirects=False).headers["location"]
        == f"/jobs/{made[3]}"
    )
    keyed = work.options(key="invoice:7").enqueue()
    assert re.findall(r'data-job="(\d+)"', client.get("/jobs?q=invoice:7").text) == [str(keyed.id)]
    assert client.get("/jobs?state=nonsense").status_code == 400


def test_every_response_denies_framing_caching_and_inline_scripts(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    job = work.enqueue()
    for path in ("/", f"/jobs/{job.id}", "/schedules", "/metrics"):
        headers = client.get(path).headers
        assert headers["x-frame-options"] == "DENY"
        assert headers["cache-control"] == "no-store"
        policy = headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
    cookie = client.get("/").headers.get("set-cookie", "") or "due_csrf already set"
    assert "due_csrf" in cookie


def test_with_a_token_every_page_and_action_needs_it(app: due.App, work: due.Task) -> None:
    job = work.enqueue()
    dashboard = app.dashboard(token="s3cret-token")
    with TestClient(dashboard, base_url="http://10.0.0.5") as client:
        assert client.get("/").status_code == 401
        assert client.get("/metrics").status_code == 401
        asked = client.get("/jobs", headers={"accept": "text/html"}, follow_redirects=False)
        assert asked.status_code == 303 and asked.headers["location"] == "/login?next=/jobs"
        assert client.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
        bearer = {"authorization": "Bearer s3cret-token"}
        assert client.get("/", headers=bearer).status_code == 200
        page = client.get(f"/jobs/{job.id}", headers=bearer).text
        token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        assert client.post(f"/jobs/{job.id}/cancel", data={"csrf": token}).status_code == 401
        assert app.get(job.id).state == due.JobState.QUEUED
        client.post("/login", data={"token": "s3cret-token"})  # the browser's way: a cookie
        assert client.get("/").status_code == 200
        done = client.post(f"/jobs/{job.id}/cancel", data={"csrf": token}, follow_redirects=False)
        assert done.status_code == 303 and app.get(job.id).state == due.JobState.CANCELLED
        assert app.history(job=job.id)[0].by.startswith("token holder via the dashboard")


def test_the_sign_in_cookie_is_a_session_of_the_dashboard_alone_not_its_token(
    app: due.App, clock: FakeClock
) -> None:
    host = Starlette(routes=[Mount("/due", app=app.dashboard(token="s3cret-token"))])
    with TestClient(host, base_url="https://example.test") as client:
        signed_in = client.post("/due/login", data={"token": "s3cret-token"})
        assert signed_in.status_code == 200
        (cookie,) = [c for c in signed_in.history[0].headers.get_list("set-cookie")]
        assert "s3cret-token" not in cookie
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"path=/due", "httponly", "samesite=lax", "secure"} <= attributes
        session = cookie.split(";")[0].partition("=")[2]
        assert client.get("/due/").status_code == 200  # the browser's way
        client.cookies.clear()
        bearer = {"authorization": f"Bearer {session}"}
        assert client.get("/due/", headers=bearer).status_code == 401  # no token
        client.cookies.set(cookie.split("=")[0], session, domain="example.test", path="/due")
        assert client.get("/due/").status_code == 200
        clock.advance("8d")  # a session ends; signing in again starts another
        assert client.get("/due/").status_code == 401
    with TestClient(app.dashboard(token="s3cret-token"), base_url="http://127.0.0.1") as client:
        signed_in = client.post("/login", data={"token": "s3cret-token"}, follow_redirects=False)
        attributes = {part.strip().lower() for part in signed_in.headers["set-cookie"].split(";")}
        assert "path=/" in attributes and "secure" not in attributes  # served over http


def test_with_basic_auth_the_user_and_password_must_both_match(app: due.App) -> None:
    dashboard = app.dashboard(basic_auth="ops:correct horse")

    def auth(user: str, password: str) -> dict[str, str]:
        return {
            "authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        }

    with TestClient(dashboard) as client:
        refused = client.get("/")
        assert refused.status_code == 401 and "Basic" in refused.headers["www-authenticate"]
        assert client.get("/", headers=auth("ops", "wrong")).status_code == 401
        assert client.get("/", headers=auth("root", "correct horse")).status_code == 401
        assert client.get("/", headers=auth("ops", "correct horse")).status_code == 200
        assert client.get("/static/due.css").status_code == 200  # no data there


def test_credentials_are_checked_when_given() -> None:
    with pytest.raises(due.ConfigurationError, match="user:password"):
        Credential.build(basic_auth="no-colon")
    with pytest.raises(due.ConfigurationError, match="empty"):
        Credential.build(token="  ")
    assert Credential.build() is None


def test_pause_and_resume_a_parents_pieces(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    parent = app.batch(work, [("a",), ("b",)])
    token = csrf_of(client, f"/jobs/{parent.id}")
    assert "Pause pieces" in client.get(f"/jobs/{parent.id}").text
    client.post(f"/jobs/{parent.id}/pause-pieces", data={"csrf": token})
    assert all(piece.held for piece in app.jobs(parent=parent.id))
    assert app.store.job_claim(ClaimRequest("emails", 2, "w", 30)) == []
    client.post(f"/jobs/{parent.id}/resume-pieces", data={"csrf": token})
    assert not any(piece.held for piece in app.jobs(parent=parent.id))
    actions = [entry.action for entry in app.history(job=parent.id)]
    assert actions == ["pause pieces", "resume pieces"]


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::"])
def test_the_dashboard_refuses_to_listen_beyond_this_host_without_a_credential(
    sqlite_url: str, host: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "due", "--url", sqlite_url, "dashboard", "--host", host],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("DUE_DASHBOARD")},
    )
    assert done.returncode == 1
    assert f"would listen on {host}" in done.stderr and "--token" in done.stderr
    assert "dashboard on http" not in done.stderr


def test_mounted_under_a_prefix_every_link_and_redirect_stays_under_it(
    app: due.App, work: due.Task
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    job = work.enqueue()
    outer = Starlette(routes=[Mount("/ops/due", app=app.dashboard())])
    with TestClient(outer, base_url="http://127.0.0.1") as client:
        page = client.get(f"/ops/due/jobs/{job.id}")
        assert page.status_code == 200
        assert 'href="/ops/due/static/due.css"' in page.text
        assert f'action="/ops/due/jobs/{job.id}/cancel"' in page.text
        assert client.get("/ops/due/static/htmx.min.js").status_code == 200
        token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        done = client.post(
            f"/ops/due/jobs/{job.id}/cancel", data={"csrf": token}, follow_redirects=False
        )
        assert done.headers["location"] == f"/ops/due/jobs/{job.id}"
        assert app.get(job.id).state == due.JobState.CANCELLED


def test_names_with_any_character_act_on_exactly_that_schedule(
    app: due.App, work: due.Task, client: TestClient
) -> None:
    odd = "reports/../daily?x=1#top"
    app.add_schedule(odd, "0 2 * * *", task=work)
    app.add_schedule("daily", "0 3 * * *", task=work)
    token = csrf_of(client, "/schedules")
    done = client.post("/schedules/pause", data={"csrf": token, "name": odd})
    assert done.status_code == 200
    paused = {o.stored.name: o.stored.paused for o in app.schedules()}
    assert paused == {odd: True, "daily": False}


def test_loopback_only_answers_to_loopback_names_and_refuses_foreign_posts(
    app: due.App, work: due.Task
) -> None:
    from due.hosts import LOOPBACK_NAMES
    from due.web.app import create_dashboard

    job = work.enqueue()
    dashboard = create_dashboard(app, allowed_hosts=LOOPBACK_NAMES)
    with TestClient(dashboard, base_url="http://127.0.0.1:8080") as client:
        assert client.get("/").status_code == 200
        rebound = client.get("/", headers={"host": "evil.example:8080"})
        assert rebound.status_code == 403 and "host name" in rebound.text
        assert client.get("/", headers={"host": "[::1]:8080"}).status_code == 200
        token = csrf_of(client)
        for origin in ("http://evil.example", "null"):
            refused = client.post(
                f"/jobs/{job.id}/cancel", data={"csrf": token}, headers={"origin": origin}
            )
            assert refused.status_code == 403, origin
        assert app.get(job.id).state == due.JobState.QUEUED
        same = client.post(
            f"/jobs/{job.id}/cancel",
            data={"csrf": token},
            headers={"origin": "http://127.0.0.1:8080"},
            follow_redirects=False,
        )
        assert same.status_code == 303 and app.get(job.id).state == due.JobState.CANCELLED


def test_a_wrong_token_at_login_sets_nothing_and_says_so(app: due.App) -> None:
    with TestClient(app.dashboard(token="s3cret-token")) as client:
        refused = client.post("/login", data={"token": "guess"}, follow_redirects=False)
        assert refused.status_code == 401 and "not this dashboard" in refused.text
        assert "due_session" not in refused.headers.get("set-cookie", "")
        assert client.post("/login", content=b"token=" + b"x" * 100_000).status_code == 401


def test_odd_input_gets_an_answer_not_an_error(app: due.App, work: due.Task) -> None:
    with TestClient(app.dashboard(basic_auth="ops:pw")) as client:
        odd = {"authorization": "Basic \u00e9t\u00e9".encode("latin-1")}
        assert client.get("/", headers=odd).status_code == 401
    with TestClient(app.dashboard()) as client:
        for path in (
            "/jobs?q=\u00b2",
            "/jobs?before=\u00b2",
            "/jobs?q=" + "9" * 30,
            "/jobs?q=a%00",
        ):
            assert client.get(path).status_code == 200, path
        assert client.get(f"/jobs/{2**70}").status_code == 404  # past 64 bits: no such job


def test_a_taken_port_is_an_error_and_never_announced_as_listening(
    app: due.App, backend_url: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "due", "--url", backend_url, "dashboard", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stderr
    assert f"could not listen on 127.0.0.1:{port}" in done.stderr
    assert "dashboard on http" not in done.stderr


def test_port_zero_listens_on_a_free_port_and_says_which(app: due.App, backend_url: str) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "due", "--url", backend_url, "dashboard", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # the first line: where it listens, once it does
        found = re.search(r"dashboard on http://127\.0\.0\.1:(\d+)/", line)
        assert found and int(found[1]) > 0, line
        with urllib.request.urlopen(f"http://127.0.0.1:{found[1]}/", timeout=30) as page:
            assert page.status == 200
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


def test_a_port_out_of_range_is_refused_by_name() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "due", "dashboard", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--port" in done.stderr and "0<=x<=65535" in done.stderr, done.stderr


def test_a_schedule_that_cannot_fire_says_why_and_the_page_still_renders(
    app: due.App, work: due.Task, client: TestClient, backend_url: str
) -> None:
    from tests.store.test_bad_schedules import SPOILERS, spoil

    app.add_schedule("broken", every="1h", task=work)
    app.add_schedule("nightly", "0 2 * * *", task=work)
    spoil(backend_url, "broken", SPOILERS["feb-30"])
    page = client.get("/schedules")
    assert page.status_code == 200 and 'data-schedule="nightly"' in page.text
    assert "cannot fire: its cron expression &#39;0 0 30 2 *&#39; never fires" in page.text
    assert client.get("/").status_code == 200  # its alert, on the overview


@contextlib.contextmanager
def served(backend_url: str, *options: str) -> Iterator[str]:
    """`due dashboard --port 0 OPTIONS` in a process of its own; its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "due", "--url", backend_url, "dashboard", "--port", "0", *options],
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("DUE_DASHBOARD")},
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # the first line: where it listens, once it does
        found = re.search(r"dashboard on (http://127\.0\.0\.1:\d+)/", line)
        assert found, line
        yield found[1]
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0


@pytest.mark.parametrize(
    ("options", "recorded"),
    [((), "127.0.0.1"), (("--trusted-proxies", "127.0.0.1"), "203.0.113.9")],
    ids=["no proxy trusted", "a trusted proxy"],
)
def test_who_acted_comes_from_a_forwarded_header_only_through_a_trusted_proxy(
    app: due.App, work: due.Task, backend_url: str, options: tuple[str, ...], recorded: str
) -> None:
    job = work.enqueue()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    browser.addheaders = [("X-Forwarded-For", "203.0.113.9")]
    with served(backend_url, *options) as base:
        with browser.open(f"{base}/jobs/{job.id}", timeout=30) as page:
            found = re.search(r'name="csrf" value="([^"]+)"', page.read().decode())
        assert found is not None
        form = urllib.parse.urlencode({"csrf": found[1]}).encode()
        with browser.open(f"{base}/jobs/{job.id}/cancel", data=form, timeout=30) as done:
            assert done.status == 200  # the job's page, after the redirect
    (entry,) = app.history(job=job.id)
    assert entry.by == f"anyone on this host via the dashboard from {recorded}"


def test_a_trusted_proxy_that_is_no_address_is_refused_by_name(backend_url: str) -> None:
    proxies = ["--trusted-proxies", "10.0.0.7, proxy.internal"]
    done = subprocess.run(
        [sys.executable, "-m", "due", "--url", backend_url, "dashboard", *proxies],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "--trusted-proxies: 'proxy.internal' is not an IP address" in done.stderr


def test_fastapi_s_dependencies_do_not_guard_a_mount_its_own_token_does(app: due.App) -> None:
    """Why the how-to says to guard the mount itself: FastAPI's global
    dependencies= run for its routes, not for a mounted dashboard."""

    def staff_only(request: Request) -> None:
        if request.headers.get("x-staff-token") != "staff":
            raise HTTPException(status_code=401)

    api = FastAPI(dependencies=[Depends(staff_only)])
    api.get("/orders")(lambda: [])
    api.mount("/open", app.dashboard())
    api.mount("/due", app.dashboard(token="s3cret-token"))
    with TestClient(api) as client:
        assert client.get("/orders").status_code == 401  # a route: guarded
        assert client.get("/open/").status_code == 200  # a mount: not
        assert client.get("/due/").status_code == 401
        assert client.get("/due/", headers={"authorization": "Bearer s3cret-token"}).is_success
