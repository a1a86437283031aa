"""due for Django: a `django.tasks` backend, `manage.py` commands, the schema
through `manage.py migrate` and the dashboard behind Django's login.

Add `"due.contrib.django"` to `INSTALLED_APPS` and::

    TASKS = {
        "default": {
            "BACKEND": "due.contrib.django.DueBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"DATABASE": "default"},
        }
    }
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from due.app import App
    from due.contrib.django.backend import DueBackend
    from due.contrib.django.task_class import DueTask, task

__all__ = ["DueBackend", "DueTask", "due_app", "task"]


def due_app(backend: str = "default") -> App:
    """The due App behind the task backend `backend` (to declare schedules and
    limits on, or to call `jobs`, `cancel`, `wait`... on)."""
    from django.tasks import task_backends

    from due.contrib.django.backend import DueBackend

    found = task_backends[backend]
    if not isinstance(found, DueBackend):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"due: TASKS[{backend!r}] uses {type(found).__name__}, not "
            "due.contrib.django.DueBackend"
        )
    return found.app


def __getattr__(name: str) -> Any:
    # Imported on first use: Django loads this package as an app before its
    # settings allow the task framework to be imported.
    if name == "DueBackend":
        from due.contrib.django.backend import DueBackend

        return DueBackend
    if name in ("DueTask", "task"):
        from due.contrib.django import task_class

        return getattr(task_class, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
