"""The dashboard mounted in the Django site: staff only, Django's CSRF,
actions recorded as done by the signed-in user."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from shop.tasks import send_welcome_email

import due


@pytest.fixture
def users() -> dict[str, User]:
    made = {}
    for name, staff in (("staff-ann", True), ("plain-bob", False)):
        user, _ = User.objects.get_or_create(username=name, defaults={"is_staff": staff})
        user.set_password("pw")
        user.save()
        made[name] = user
    return made


def test_an_anonymous_visitor_is_sent_to_the_login_page() -> None:
    response = Client().get("/jobs/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/jobs/"
    assert Client().get("/jobs/jobs").status_code == 302


def test_a_signed_in_user_who_is_not_staff_is_refused(users: dict[str, User]) -> None:
    client = Client()
    client.force_login(users["plain-bob"])
    assert client.get("/jobs/").status_code == 403
    assert client.post("/jobs/jobs/1/cancel", {}).status_code == 403


def test_staff_see_the_dashboard_under_the_site_s_url(users: dict[str, User]) -> None:
    job = send_welcome_email.enqueue("dashboard@example.com")
    client = Client()
    client.force_login(users["staff-ann"])
    overview = client.get("/jobs/")
    assert overview.status_code == 200
    assert 'href="/jobs/jobs' in overview.content.decode()  # links stay under the mount
    page = client.get(f"/jobs/jobs/{job.id}")
    assert page.status_code == 200
    assert "dashboard@example.com" in page.content.decode()
    assert client.get("/jobs/static/due.css").status_code == 200


def test_an_action_needs_django_s_csrf_token_and_is_recorded_as_the_user_s(
    users: dict[str, User],
) -> None:
    from due.contrib.django import due_app

    app: due.App = due_app()
    job = send_welcome_email.enqueue("cancel-me@example.com")
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["staff-ann"])
    refused = client.post(f"/jobs/jobs/{job.id}/cancel", {"next": f"/jobs/jobs/{job.id}"})
    assert refused.status_code == 403  # Django's CSRF check
    assert app.get(int(job.id)).state == due.JobState.QUEUED
    page = client.get(f"/jobs/jobs/{job.id}").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None, "the dashboard's forms carry Django's CSRF token"
    done = client.post(
        f"/jobs/jobs/{job.id}/cancel",
        {"csrfmiddlewaretoken": token.group(1), "next": f"/jobs/jobs/{job.id}"},
    )
    assert done.status_code == 303
    assert done["Location"] == f"/jobs/jobs/{job.id}"
    assert app.get(int(job.id)).state == due.JobState.CANCELLED
    (entry,) = app.history(job=int(job.id))
    assert entry.action == "cancel"
    assert entry.by.startswith("staff-ann (Django user)")


def test_behind_a_proxy_an_origin_django_trusts_may_act(users: dict[str, User]) -> None:
    """Django decides on the origin (CSRF_TRUSTED_ORIGINS, forwarded hosts): the
    dashboard does not refuse again a POST whose Origin names the proxy's host."""
    from django.test import override_settings

    from due.contrib.django import due_app

    job = send_welcome_email.enqueue("proxied@example.com")
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["staff-ann"])
    page = client.get(f"/jobs/jobs/{job.id}").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    with override_settings(CSRF_TRUSTED_ORIGINS=["https://jobs.example.com"]):
        done = client.post(
            f"/jobs/jobs/{job.id}/cancel",
            {"csrfmiddlewaretoken": token.group(1)},
            HTTP_ORIGIN="https://jobs.example.com",
        )
    assert done.status_code == 303, done.content
    assert due_app().get(int(job.id)).state == due.JobState.CANCELLED


def test_a_query_string_beyond_ascii_reaches_the_dashboard(users: dict[str, User]) -> None:
    client = Client()
    client.force_login(users["staff-ann"])
    response = client.get("/jobs/jobs", {"task": "shop.tasks.é"})
    assert response.status_code == 200


def test_cancel_all_by_a_filter_needs_django_s_csrf_token_and_is_the_user_s(
    users: dict[str, User],
) -> None:
    from due.contrib.django import due_app

    app: due.App = due_app()
    jobs = [
        app.enqueue(
            "shop.tasks.send_welcome_email", [f"bulk{n}@example.com"], key=f"bulk-django:{n}"
        )
        for n in range(2)
    ]
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["staff-ann"])
    page = client.get("/jobs/jobs/all/cancel", {"key_prefix": "bulk-django:"}).content.decode()
    assert 'id="bulk-count">2<' in page
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None, "the confirmation carries Django's CSRF token"
    form = {"key_prefix": "bulk-django:", "expected": "2"}
    assert client.post("/jobs/jobs/all/cancel", form).status_code == 403  # Django's CSRF check
    assert {app.get(int(job.id)).state for job in jobs} == {due.JobState.QUEUED}
    done = client.post("/jobs/jobs/all/cancel", {**form, "csrfmiddlewaretoken": token.group(1)})
    assert done.status_code == 200 and 'id="bulk-done">2<' in done.content.decode()
    assert {app.get(int(job.id)).state for job in jobs} == {due.JobState.CANCELLED}
    (entry,) = [a for a in app.history() if "bulk-django" in a.action]
    # (a form without an until acts on the jobs there are at the POST)
    assert re.fullmatch(r"cancel 2 jobs where until=\S+ key_prefix=bulk-django:", entry.action)
    assert entry.by.startswith("staff-ann (Django user)")
