"""How the backend reads Django's settings: the database due connects to."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

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
