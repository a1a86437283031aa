"""The `DUE` settings block: limits and schedules declared in settings, and
the modules that hold tasks.

::

    DUE = {
        "LIMITS": {"stripe": {"rate": "100/s"}},
        "SCHEDULES": {
            "nightly-report": {"task": "reports.tasks.nightly", "cron": "0 3 * * *"},
        },
        "TASK_MODULES": ["reports.jobs"],  # besides every installed app's tasks.py
        "BACKEND": "default",              # the TASKS alias these apply to
    }

Each LIMITS entry takes the options of `app.limit` (declared on every due
backend's App), each SCHEDULES entry those of `app.schedule` (`task` by its
module path; defined on the `BACKEND` one's App only).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from due.app import App
from due.contrib.django.running import register_seen
from due.errors import DueError

KNOWN_KEYS = frozenset({"LIMITS", "SCHEDULES", "TASK_MODULES", "BACKEND"})
BACKEND_PATH = "due.contrib.django.DueBackend"


def block() -> dict[str, Any]:
    """The `DUE` setting, checked."""
    found = getattr(settings, "DUE", {}) or {}
    if not isinstance(found, dict):
        raise ImproperlyConfigured(f"due: DUE must be a dict, got {type(found).__name__}")
    unknown = set(found) - KNOWN_KEYS
    if unknown:
        raise ImproperlyConfigured(
            f"due: DUE has {', '.join(sorted(unknown))}, which due does not know; "
            f"it takes {', '.join(sorted(KNOWN_KEYS))}"
        )
    return found


def backend_alias() -> str:
    return str(block().get("BACKEND", "default"))


def configure(alias: str, app: App) -> None:
    """Make a new App of `alias` ready: the limits (every App has them: a task
    may be sent to any backend), the tasks seen so far, and its schedules
    (only the `DUE["BACKEND"]` one's: another database would run them twice)."""
    _declare(app, "LIMITS", lambda name, entry: app.limit(name, **entry))
    register_seen(app, alias)
    if alias == backend_alias() and _loaded.is_set():
        define_schedules(app)


_loaded = threading.Event()
"""The task modules have been imported (the schedules' tasks are known)."""


def load_tasks() -> None:
    """Import every installed app's `tasks` module and the `TASK_MODULES`, so
    the worker knows every task (a task is registered when its module is imported)."""
    autodiscover_modules("tasks")
    for module in block().get("TASK_MODULES", ()):
        importlib.import_module(module)
    _loaded.set()


def uses_due(alias: str) -> bool:
    entry = (getattr(settings, "TASKS", {}) or {}).get(alias) or {}
    return entry.get("BACKEND") == BACKEND_PATH


def define_schedules(app: App) -> None:
    known = app.defined_schedules
    _declare(
        app,
        "SCHEDULES",
        lambda name, entry: None if name in known else app.schedule(name, **entry),
    )


def _declare(app: App, key: str, declare: Any) -> None:
    entries = block().get(key, {}) or {}
    if not isinstance(entries, dict):
        raise ImproperlyConfigured(f"due: DUE[{key!r}] must be a dict of name to options")
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise ImproperlyConfigured(f"due: DUE[{key!r}][{name!r}] must be a dict of options")
        try:
            declare(name, dict(entry))
        except (DueError, TypeError) as error:
            raise ImproperlyConfigured(f"due: DUE[{key!r}][{name!r}]: {error}") from error
