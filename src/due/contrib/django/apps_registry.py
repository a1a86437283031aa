"""One due `App` per backend alias, shared by every thread of the process.

Django makes a backend object per thread (its handlers are thread-local), but
an App holds connections and the task registry: it is made once, here. It
follows its database: when the alias's settings change (Django's test runner
switches to a test database), a new App is made on the new database and the
tasks seen so far are registered on it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from due.app import App
from due.contrib.django.database import url_of_alias

KNOWN_OPTIONS = frozenset({"DATABASE", "URL"})

_apps: dict[str, App] = {}
_lock = threading.Lock()
_on_new_app: list[Callable[[str, App], None]] = []


def app_for(alias: str, params: dict[str, Any]) -> App:
    """The due App of the backend `alias` (made on first use, or when its
    database changed)."""
    url = url_from(alias, params.get("OPTIONS") or {})
    app = _apps.get(alias)
    if app is not None and app.url == url:
        return app
    with _lock:
        app = _apps.get(alias)
        if app is None or app.url != url:
            if app is not None:
                app.close()
            app = App(url)
            for hook in _on_new_app:
                hook(alias, app)
            _apps[alias] = app
        return app


def when_made(hook: Callable[[str, App], None]) -> None:
    """Call `hook(alias, app)` for every App made from now on, before it is used."""
    _on_new_app.append(hook)


def url_from(alias: str, options: dict[str, Any]) -> str:
    """The due database URL of a backend's OPTIONS."""
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise ImproperlyConfigured(
            f"due: TASKS[{alias!r}]['OPTIONS'] has {', '.join(sorted(unknown))}, which due "
            f"does not know; it takes {' or '.join(sorted(KNOWN_OPTIONS))}"
        )
    if "URL" in options and "DATABASE" in options:
        raise ImproperlyConfigured(
            f"due: TASKS[{alias!r}]['OPTIONS'] gives both DATABASE and URL; give one"
        )
    if "URL" in options:
        return str(options["URL"])
    return url_of_alias(str(options.get("DATABASE", "default")))


def database_alias(params: dict[str, Any]) -> str | None:
    """The Django database the jobs share transactions with (None with a URL)."""
    options = params.get("OPTIONS") or {}
    return None if "URL" in options else str(options.get("DATABASE", "default"))


def close_apps() -> None:
    """Close every App's connections (each opens them again if used)."""
    with _lock:
        for app in _apps.values():
            app.close()
