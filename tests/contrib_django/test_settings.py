"""How the backend reads Django's settings: the database due connects to."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from due.contrib.django.apps_registry import url_from
from due.contrib.django.database import _postgres_url


def test_a_postgres_url_keeps_what_libpq_needs_to_reach_the_same_database() -> None:
    assert _postgres_url({"HOST": "::1", "PORT": "5433", "NAME": "shop"}) == (
        "postgresql://[::1]:5433/shop"
    )
    assert _postgres_url({"HOST": "/run/postgresql", "NAME": "shop", "USER": "ann"}) == (
        "postgresql://ann@/shop?host=%2Frun%2Fpostgresql"
    )
    url = _postgres_url(
        {
            "NAME": "shop",
            "USER": "ann",
            "PASSWORD": "p@ss word",
            "HOST": "db",
            "OPTIONS": {"options": "-c search_path=app", "sslmode": "require", "pool": True},
        }
    )
    assert url == (
        "postgresql://ann:p%40ss%20word@db/shop?options=-c%20search_path%3Dapp&sslmode=require"
    )


def test_an_option_due_cannot_apply_is_refused_with_what_to_do() -> None:
    with pytest.raises(ImproperlyConfigured, match=r'assume_role .* OPTIONS\["URL"\]'):
        _postgres_url({"NAME": "shop", "OPTIONS": {"assume_role": "reporting"}})


def test_the_backend_options_are_checked() -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABSE, which due does not know"):
        url_from("x", {"DATABSE": "default"})
    with pytest.raises(ImproperlyConfigured, match="both DATABASE and URL"):
        url_from("x", {"DATABASE": "default", "URL": "sqlite:///x.db"})
    with pytest.raises(ImproperlyConfigured, match="'nowhere', which is not in DATABASES"):
        url_from("x", {"DATABASE": "nowhere"})
    assert url_from("x", {"URL": "sqlite:///elsewhere.db"}) == "sqlite:///elsewhere.db"


def test_a_flush_empties_due_s_tables_in_that_database_and_never_a_url_s(
    tmp_path: Path,
) -> None:
    """What due's test runner does after a test that used `default`: the
    backends whose jobs live there are emptied; one with a URL of its own is not
    Django's test database, and keeps its jobs."""
    from due.contrib.django import due_app
    from due.contrib.django.schema import empty_databases

    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    tasks = {
        **django_settings.TASKS,
        "elsewhere": {"BACKEND": "due.contrib.django.DueBackend", "OPTIONS": {"URL": elsewhere}},
    }
    with override_settings(TASKS=tasks):
        kept, emptied, other = due_app("elsewhere"), due_app("default"), due_app("pg")
        kept.migrate()
        for app in (kept, emptied, other):
            app.store.action_record("pause", "ann", queue="emails")  # a row in each database
        empty_databases(["default"])
        assert [entry.by for entry in kept.history()] == ["ann"]
        assert [entry.by for entry in other.history()] == ["ann"]  # another Django database
        assert emptied.history() == []
        kept.close()


def test_backends_sharing_a_database_keep_their_limits_after_emptying() -> None:
    """Two backends whose jobs live in `default`: emptying one must not wipe the
    limits the other has just written again (each App writes its own only once,
    before its first enqueue, and would not write them again)."""
    from due.contrib.django import due_app
    from due.contrib.django.schema import empty_databases
    from due.testing import empty

    shared = {"BACKEND": "due.contrib.django.DueBackend", "OPTIONS": {"DATABASE": "default"}}
    tasks = {**django_settings.TASKS, "first": shared, "second": shared}
    with override_settings(TASKS=tasks):
        first, second = due_app("first"), due_app("second")
        first.limit("first-only", concurrency=1)
        empty_databases(["default"])
        names = {overview.name for overview in first.limit_overview()}
        assert "first-only" in names, names
        first.close()
        second.close()
    empty(due_app("default"))  # first-only goes
