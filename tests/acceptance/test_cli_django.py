"""`--django` and DJANGO_SETTINGS_MODULE from the core's side (the Django
project itself: tests/contrib_django, on the newest Python)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.helpers.cli import run_due_in

DJANGO_MISSING = importlib.util.find_spec("django") is None


def test_django_and_app_both_given_is_refused(tmp_path: Path) -> None:
    shown = run_due_in(
        tmp_path, "--django", "mysite.settings", "--app", "a:app", "status", expect=1
    )
    assert "--django mysite.settings and --app a:app both name the app; give one" in shown


@pytest.mark.skipif(not DJANGO_MISSING, reason="this environment has Django: the project tests run")
def test_a_django_project_without_django_installed_says_what_to_install(tmp_path: Path) -> None:
    shown = run_due_in(tmp_path, "--django", "mysite.settings", "status", expect=1)
    assert "Django is not installed here: pip install 'due[django]'" in shown
    by_environment = run_due_in(
        tmp_path, "status", expect=1, env={"DJANGO_SETTINGS_MODULE": "mysite.settings"}
    )
    assert "pip install 'due[django]'" in by_environment


def test_an_explicit_url_wins_over_django_settings_module(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    run_due_in(tmp_path, "--url", url, "migrate", env={"DJANGO_SETTINGS_MODULE": "nowhere"})
    shown = run_due_in(
        tmp_path, "--url", url, "jobs", env={"DJANGO_SETTINGS_MODULE": "nowhere.settings"}
    )
    assert "django" not in shown.lower()  # exit 0 (run_due_in): the URL's database was read
