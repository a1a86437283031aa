"""due's tables through `manage.py migrate`: created by this app's migration,
upgraded after every `migrate` run (Django's `post_migrate`), so upgrading due
needs no second command. `due migrate` stays for use without Django."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from due.app import App
from due.contrib.django.apps_registry import app_for, database_alias
from due.contrib.django.configuration import BACKEND_PATH


def migrate_for_connection(apps: Any, schema_editor: Any) -> None:
    """The migration's RunPython: due's migrations on the database being migrated."""
    migrate_database(schema_editor.connection.alias)


def after_migrate(
    sender: Any, using: str = DEFAULT_DB_ALIAS, plan: Any = None, **kwargs: Any
) -> None:
    """post_migrate: apply due's migrations that are new since the last run.

    Not after `flush` (which sends it too, without a plan: between a
    TransactionTestCase's tests): nothing there is new.
    """
    if plan is not None:
        migrate_database(using)


def migrate_database(alias: str) -> list[int]:
    """Apply due's migrations for every due backend whose jobs live in the Django
    database `alias` (a backend with a URL of its own goes with "default").
    Returns the versions applied."""
    applied: list[int] = []
    for backend, params in (getattr(settings, "TASKS", {}) or {}).items():
        if params.get("BACKEND") != BACKEND_PATH:
            continue
        own = database_alias(params)
        if own == alias or (own is None and alias == DEFAULT_DB_ALIAS):
            applied += app_for(backend, params).migrate()
    return applied


def empty_databases(aliases: Iterable[str]) -> None:
    """Empty due's tables for every due backend whose jobs live in one of the
    Django databases `aliases` ("DATABASE"; one with a URL of its own is not
    Django's test database, and is left alone)."""
    from due.testing import empty

    wanted = set(aliases)
    sharing: dict[str, list[App]] = {}
    for backend, params in (getattr(settings, "TASKS", {}) or {}).items():
        alias = database_alias(params)
        if params.get("BACKEND") != BACKEND_PATH or alias not in wanted:
            continue
        if connections[alias].vendor == "sqlite" and connections[alias].is_in_memory_db():
            # Where a process of --parallel started by forkserver or spawn has
            # its SQLite test database: due cannot reach it, so holds no job there.
            continue
        app = app_for(backend, params)
        sharing.setdefault(app.url, []).append(app)
    for first, *others in sharing.values():
        # Each database once: emptying it for a second backend would delete the
        # limits the first's App has just written again, which that App, having
        # written them, would not write before its next enqueue.
        empty(first)
        for app in others:
            app.sync_limits()
