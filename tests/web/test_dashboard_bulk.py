"""The jobs page's "Retry all N" / "Cancel all N" and its arguments search, over
HTTP on both backends: N counted as the action counts it, a confirmation that
shows N and the filter, a POST that needs the CSRF token and acts on exactly
the filter (recorded in the history once), never without a filter, and a
search that says what is wrong with it and never shows a hidden value."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

import due
from due.clock import FakeClock
from due.core.records import ClaimRequest, Completion
from due.web import bulk

SECRET = "tok-9f8e7d6c"


@pytest.fixture
def charge(app: due.App) -> due.Task:
    @app.task(name="charge", queue="billing", retry=due.Retry(max_attempts=1))
    def charge(customer_id: int = 0, token: str = "") -> None: ...

    return charge


@pytest.fixture
def client(app: due.App) -> Iterator[TestClient]:
    with TestClient(app.dashboard(), base_url="http://127.0.0.1") as client:
        yield client


def failed(app: due.App, task: due.Task, error: str, **kwargs: object) -> due.Job:
    """A job of `task` that ran once and failed with `error`."""
    job = task.enqueue(**kwargs)
    (claimed,) = app.store.job_claim(ClaimRequest(job.queue, 1, "web-1:1:a", 30))
    assert claimed.id == job.id
    attempt = due.AttemptError(claimed.attempt, error, None, app.store.now())
    app.store.job_complete(
        [Completion(claimed.id, claimed.lease_token, due.JobState.FAILED, error=attempt)]  # type: ignore[attr-defined]
    )
    return app.get(job.id)


def buttons(page: str) -> dict[str, str]:
    """The bulk buttons of a jobs page: action -> label."""
    return dict(re.findall(r'data-bulk="(\w+)">([^<]+)</button>', page))


def confirmation_form(page: str) -> dict[str, str]:
    """The confirmation's POST form: its hidden fields (the CSRF token among them)."""
    form = re.search(r'<form method="post" action="/jobs/all/\w+".*?</form>', page, re.S)
    assert form, page
    return dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form.group(0)))


def states(app: due.App, jobs: list[due.Job]) -> list[due.JobState]:
    return [app.get(job.id).state for job in jobs]


def test_retry_all_acts_on_exactly_the_filter_and_only_with_the_csrf_token(
    app: due.App, charge: due.Task, client: TestClient
) -> None:
    timeouts = [failed(app, charge, "TimeoutError: gateway", customer_id=n) for n in range(3)]
    other = failed(app, charge, "ValueError: card declined", customer_id=9)
    charge.enqueue(customer_id=10)  # queued: cancel would take it, retry not
    page = client.get("/jobs?task=charge&error_contains=TimeoutError").text
    assert buttons(page)["retry"] == "Retry all 3"
    assert 'data-bulk="cancel"' not in page  # no queued job has that error

    confirm = client.get("/jobs/all/retry?task=charge&state=failed&error_contains=TimeoutError")
    assert confirm.status_code == 200
    assert re.search(r'id="bulk-count">3<', confirm.text)
    form = confirmation_form(confirm.text)
    described = f"task=charge state=failed until={form['until']} error_contains=TimeoutError"
    assert described in confirm.text
    assert form["expected"] == "3" and form["error_contains"] == "TimeoutError"
    assert form["state"] == "failed"

    without = {name: value for name, value in form.items() if name != "csrf"}
    assert client.post("/jobs/all/retry", data=without).status_code == 403
    forged = client.post("/jobs/all/retry", data={**without, "csrf": "forged"})
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert states(app, [*timeouts, other]) == [due.JobState.FAILED] * 4
    assert app.history() == []

    done = client.post("/jobs/all/retry", data=form)
    assert done.status_code == 200 and re.search(r'id="bulk-done">3<', done.text)
    assert "bulk-changed" not in done.text
    assert states(app, timeouts) == [due.JobState.QUEUED] * 3
    assert app.get(other.id).state == due.JobState.FAILED
    (action,) = app.history()
    assert action.action == f"retry 3 jobs where {described}"  # until: when confirmed
    assert action.by.startswith("anyone on this host via the dashboard")


def test_cancel_all_takes_the_unfinished_jobs_of_the_filter(
    app: due.App, charge: due.Task, client: TestClient
) -> None:
    ended = failed(app, charge, "boom")
    unfinished = [charge.enqueue(customer_id=n) for n in range(3)]
    (running,) = app.store.job_claim(ClaimRequest("billing", 1, "web-1:1:a", 30))
    assert running.id == unfinished[0].id
    page = client.get("/jobs?queue=billing").text
    assert buttons(page) == {"retry": "Retry all 1", "cancel": "Cancel all 3"}
    form = confirmation_form(client.get("/jobs/all/cancel?queue=billing").text)
    assert form["expected"] == "3" and "state" not in form
    done = client.post("/jobs/all/cancel", data=form)
    assert done.status_code == 200 and re.search(r'id="bulk-done">3<', done.text)
    asked = app.get(running.id)
    assert asked.state == due.JobState.RUNNING and asked.cancel_requested  # asked to stop
    assert states(app, unfinished[1:]) == [due.JobState.CANCELLED] * 2
    assert app.get(ended.id).state == due.JobState.FAILED
    assert [a.action for a in app.history(queue="billing")] == [
        f"cancel 3 jobs where queue=billing until={form['until']}"
    ]


def test_no_bulk_action_without_a_filter_or_outside_the_actions_states(
    app: due.App, charge: due.Task, client: TestClient
) -> None:
    job = failed(app, charge, "boom")
    assert buttons(client.get("/jobs").text) == {}
    assert buttons(client.get("/jobs?state=succeeded").text) == {}
    assert buttons(client.get("/jobs?task=charge&q=some-key").text) == {}
    assert buttons(client.get("/jobs?state=failed").text) == {"retry": "Retry all 1"}
    token = re.search(r'name="csrf" value="([^"]+)"', client.get(f"/jobs/{job.id}").text)
    assert token
    for path, form in (
        ("/jobs/all/retry", {}),
        ("/jobs/all/retry", {"state": "", "task": " "}),
        ("/jobs/all/retry", {"state": "queued"}),
        ("/jobs/all/cancel", {"state": "failed"}),
        ("/jobs/all/retry", {"task": "charge", "q": "some-key"}),
    ):
        query = "&".join(f"{name}={value}" for name, value in form.items())
        assert client.get(f"{path}?{query}").status_code == 400, form
        refused = client.post(path, data={**form, "csrf": token.group(1)})
        assert refused.status_code == 400 and "nothing to" in refused.text, form
    assert client.post("/jobs/all/everything", data={"csrf": token.group(1)}).status_code == 404
    assert app.get(job.id).state == due.JobState.FAILED and app.history() == []


def test_the_result_says_how_many_were_touched_when_jobs_changed_after_the_confirmation(
    app: due.App, charge: due.Task, client: TestClient
) -> None:
    first = [failed(app, charge, "TimeoutError") for _ in range(2)]
    form = confirmation_form(client.get("/jobs/all/retry?task=charge").text)
    assert form["expected"] == "2"
    later = failed(app, charge, "TimeoutError")
    app.retry(first[0].id)  # retried by someone else meanwhile
    done = client.post("/jobs/all/retry", data=form)
    assert re.search(r'id="bulk-done">2<', done.text)  # first[1] and later
    assert states(app, [first[1], later]) == [due.JobState.QUEUED] * 2
    assert "bulk-changed" not in done.text  # 2 confirmed, 2 done

    @app.task(name="refund", queue="refunds", retry=due.Retry(max_attempts=1))
    def refund() -> None: ...

    again = failed(app, refund, "TimeoutError")
    form = confirmation_form(client.get("/jobs/all/retry?task=refund").text)
    failed(app, refund, "TimeoutError")
    done = client.post("/jobs/all/retry", data=form)
    changed = re.search(r'id="bulk-changed">([^<]+)<', done.text)
    assert changed and "You confirmed 1: 1 more" in changed.group(1), done.text
    assert app.get(again.id).state == due.JobState.QUEUED


def test_a_time_is_fixed_at_the_confirmation(
    app: due.App, charge: due.Task, client: TestClient, clock: FakeClock
) -> None:
    old = failed(app, charge, "TimeoutError")
    clock.advance(3600)
    recent = failed(app, charge, "TimeoutError")
    page = client.get("/jobs/all/retry?task=charge&since=30m").text
    form = confirmation_form(page)
    assert form["since"] == (app.store.now() - timedelta(minutes=30)).isoformat()
    assert form["expected"] == "1" and f'data-job="{recent.id}"' in page
    clock.advance(3600)  # "the last 30 minutes" would now hold neither
    assert re.search(r'id="bulk-done">1<', client.post("/jobs/all/retry", data=form).text)
    assert states(app, [old, recent]) == [due.JobState.FAILED, due.JobState.QUEUED]


def test_the_post_acts_on_the_jobs_there_were_at_the_confirmation_and_at_most_its_cap(
    app: due.App,
    charge: due.Task,
    client: TestClient,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    confirmed = failed(app, charge, "TimeoutError")
    form = confirmation_form(client.get("/jobs/all/retry?task=charge").text)
    clock.advance(60)
    after = failed(app, charge, "TimeoutError")  # failed after the operator looked
    assert re.search(r'id="bulk-done">1<', client.post("/jobs/all/retry", data=form).text)
    assert states(app, [confirmed, after]) == [due.JobState.QUEUED, due.JobState.FAILED]

    monkeypatch.setattr(bulk, "CONFIRM_CAP", 2)
    app.enqueue_many([charge.request(customer_id=n) for n in range(3)])
    crafted = {"csrf": form["csrf"], "task": "charge"}  # no confirmation offered this
    refused = client.post("/jobs/all/cancel", data=crafted)
    assert refused.status_code == 409 and "more than 2 jobs match" in refused.text
    assert app.jobs(task="charge", state="cancelled") == []


def test_past_its_caps_the_page_stops_counting_and_the_confirmation_offers_the_cli(
    app: due.App, charge: due.Task, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "COUNT_CAP", 3)
    monkeypatch.setattr(bulk, "CONFIRM_CAP", 6)
    app.enqueue_many([charge.request(customer_id=n) for n in range(6)])
    assert buttons(client.get("/jobs?task=charge").text) == {"cancel": "Cancel all 3+"}
    confirm = client.get("/jobs/all/cancel?task=charge").text
    assert re.search(r'id="bulk-count">6<', confirm) and "<h1>Cancel" in confirm
    charge.enqueue(customer_id=6)
    none = client.get("/jobs/all/cancel", params={"task": "charge", "key_prefix": "a b"})
    assert "No job to cancel" in none.text and 'method="post"' not in none.text
    later = {"task": "charge", "until": "2099-01-01T00:00Z"}
    too_many = client.get("/jobs/all/cancel", params=later)
    assert re.search(r'<h1>More than <span id="bulk-count">6<', too_many.text)
    assert 'method="post"' not in too_many.text  # no button: the command line instead
    command = re.search(r'id="bulk-command">([^<]+)<', too_many.text)
    assert command, too_many.text
    assert command.group(1) == (
        "due cancel --app APP --task charge --until 2099-01-01T00:00:00+00:00 --yes"
    )


def test_arguments_search_finds_by_containment_and_says_what_is_wrong(
    app: due.App, charge: due.Task, client: TestClient
) -> None:
    wanted = charge.enqueue(customer_id=42, token=SECRET)
    charge.enqueue(customer_id=7, token=SECRET)
    found = client.get('/jobs?args_contains={"customer_id": 42}')
    assert found.status_code == 200
    assert re.findall(r'data-job="(\d+)"', found.text) == [str(wanted.id)]
    assert buttons(found.text) == {"cancel": "Cancel all 1"}
    for search, said in (
        ("{customer_id: 42}", "is not JSON"),
        ("[42]", "must be a JSON object"),
        ("[" * 5000, "is not JSON"),
        ('{"token": "tok"}', "&#39;token&#39; is redacted"),
        ('{"customer": {"Password": "x"}}', "&#39;Password&#39; is redacted"),
    ):
        page = client.get("/jobs", params={"args_contains": search})
        assert page.status_code == 400, search
        problem = re.search(r'id="problem">([^<]+)<', page.text)
        assert problem and said in problem.group(1), (search, page.text)
        assert re.findall(r'data-job="(\d+)"', page.text) == []
        assert buttons(page.text) == {}
    refused = client.get("/jobs/all/cancel", params={"args_contains": '{"token": "tok"}'})
    assert refused.status_code == 400 and "redacted" in refused.text
    for path in (
        '/jobs?args_contains={"customer_id": 42}',
        '/jobs/all/cancel?args_contains={"customer_id": 42}',
        f"/jobs/{wanted.id}",
    ):
        page = client.get(path).text
        assert SECRET not in page, path


def test_odd_filters_get_an_answer_not_an_error(
    app: due.App, charge: due.Task, client: TestClient
) -> None:
    charge.enqueue()
    for query in (
        "since=soon",
        "until=%00",
        "since=2026-12-05T10:02:00",  # no offset
        "state=nonsense",
    ):
        assert client.get(f"/jobs?{query}").status_code == 400, query
        assert client.get(f"/jobs/all/cancel?{query}").status_code == 400, query
    for query in ("task=a%00", "key_prefix=%00", "error_contains=" + "x" * 5000):
        page = client.get(f"/jobs?{query}")
        assert page.status_code == 200 and buttons(page.text) == {}, query


def test_a_task_no_one_knows_is_said_with_the_closest_and_offers_no_action(
    app: due.App, charge: due.Task, client: TestClient
) -> None:
    """An empty list for a misspelt task looked like an answer."""
    failed(app, charge, "TimeoutError: gateway")
    page = client.get("/jobs?task=charg")
    assert page.status_code == 200 and buttons(page.text) == {}
    unknown = re.search(r'id="unknown-task">([^<]+)<', page.text)
    assert unknown, page.text
    assert "No job matches: no task named &#39;charg&#39; is known" in unknown.group(1)
    assert "did you mean &#39;charge&#39;?" in unknown.group(1)
    empty = client.get("/jobs?task=charge&state=queued").text  # known: an answer
    assert "No job matches." in empty and 'id="unknown-task"' not in empty
    refused = client.get("/jobs/all/retry?task=charg")
    assert refused.status_code == 400 and "did you mean &#39;charge&#39;?" in refused.text
    assert client.get("/jobs/all/retry?task=charge").status_code == 200
