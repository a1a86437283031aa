"""A project as `django-admin startproject` makes it, with due set up in part:
what due says when the app is missing, when its tables are, and where the
dashboard sends a visitor who is not signed in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DJANGO_ADMIN = Path(sys.executable).with_name("django-admin")
BACKEND = """
TASKS = {
    "default": {
        "BACKEND": "due.contrib.django.DueBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"DATABASE": "default"},
    }
}
"""
TASKS_MODULE = """
from django.tasks import task


@task
def hello(name):
    return name
"""
VIEWS = """
from django.http import JsonResponse

from shop.tasks import hello


def greet(request):
    return JsonResponse({"id": hello.enqueue("ann").id})
"""
URLS = """
from django.contrib import admin
from django.urls import include, path

from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("greet/", views.greet),
    path("jobs/", include("due.contrib.django.urls")),
]
"""
URLS_WITHOUT_ADMIN = """
from django.urls import include, path

urlpatterns = [path("jobs/", include("due.contrib.django.urls"))]
"""


class Project:
    """A new project in `folder`: `startproject mysite` and an app `shop` whose
    view enqueues a task, as the Django page starts one (urls.py imports the
    view, so `manage.py check` imports the task module)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "PYTEST_XDIST_WORKER")
        }
        self.run(str(DJANGO_ADMIN), "startproject", "mysite", ".")
        (folder / "shop").mkdir()  # what startapp makes, less what no test here needs
        (folder / "shop" / "__init__.py").write_text("")
        (folder / "shop" / "tasks.py").write_text(TASKS_MODULE)
        (folder / "shop" / "views.py").write_text(VIEWS)
        (folder / "mysite" / "urls.py").write_text(URLS)
        (folder / "mysite" / "urls_without_admin.py").write_text(URLS_WITHOUT_ADMIN)

    def settings(self, text: str) -> None:
        with (self.folder / "mysite" / "settings.py").open("a") as settings:
            settings.write(text)

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            command, cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=120
        )
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def manage(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "manage.py", *arguments, check=check)

    def shell(self, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.manage("shell", "--no-imports", "-c", script, check=check)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def test_without_due_s_app_check_and_the_first_enqueue_say_to_add_it(project: Project) -> None:
    project.settings('INSTALLED_APPS += ["shop"]\n' + BACKEND)
    advice = (
        '"due.contrib.django" is not in INSTALLED_APPS: add it, then run `python manage.py migrate`'
    )
    checked = project.manage("check", check=False)
    assert checked.returncode != 0
    assert advice in checked.stderr
    enqueued = project.shell('from shop.tasks import hello; hello.enqueue("ann")', check=False)
    assert enqueued.returncode != 0
    assert advice in enqueued.stderr
    assert "due migrate" not in enqueued.stderr


def test_before_migrate_the_first_enqueue_says_to_run_manage_py_migrate(project: Project) -> None:
    project.settings('INSTALLED_APPS += ["due.contrib.django", "shop"]\n' + BACKEND)
    project.manage("check")
    enqueued = project.shell('from shop.tasks import hello; hello.enqueue("ann")', check=False)
    assert enqueued.returncode != 0
    last = enqueued.stderr.strip().splitlines()[-1]
    assert last.startswith("due.errors.NotMigratedError: SQLite database "), last
    assert "run `python manage.py migrate`" in last
    assert "due migrate" not in last
    project.manage("migrate")
    printed = project.shell('from shop.tasks import hello; print(hello.enqueue("ann").status)')
    assert printed.stdout.strip() == "READY"


def test_the_dashboard_sends_a_visitor_to_the_admin_s_login_without_login_url(
    project: Project,
) -> None:
    """Django's LOGIN_URL defaults to /accounts/login/, a page a new project has
    not: unless the settings set it, the admin's login is used; with no admin
    either, the page says what to set."""
    project.settings('INSTALLED_APPS += ["due.contrib.django", "shop"]\n' + BACKEND)
    printed = project.shell(
        "from django.test import Client, override_settings\n"
        'client = Client(HTTP_HOST="localhost")\n'
        'sent = client.get("/jobs/")\n'
        'print(sent.status_code, sent["Location"])\n'
        'print(client.get(sent["Location"]).status_code)\n'
        'with override_settings(ROOT_URLCONF="mysite.urls_without_admin"):\n'
        '    refused = client.get("/jobs/")\n'
        "print(refused.status_code, refused.content.decode())\n"
        'with override_settings(LOGIN_URL="/sign-in/"):\n'
        '    print(client.get("/jobs/")["Location"])\n'
    )
    lines = printed.stdout.splitlines()
    assert lines[0] == "302 /admin/login/?next=/jobs/"
    assert lines[1] == "200"  # the admin's login page
    assert lines[2].startswith("403 ") and "Set LOGIN_URL" in lines[2]
    assert lines[-1] == "/sign-in/?next=/jobs/"
