"""The App of a Django project, for the `due` command: `due --django
mysite.settings jobs` (or any `due` command with DJANGO_SETTINGS_MODULE set)
loads `due.contrib.django.cli:app`, which sets Django up and gives the App of
the due backend (`DUE["BACKEND"]`, default "default")."""

from __future__ import annotations

from typing import Any

APP_SPEC = "due.contrib.django.cli:app"


def __getattr__(name: str) -> Any:
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import django
    except ImportError:
        from due.errors import ConfigurationError

        raise ConfigurationError(
            "--django (or DJANGO_SETTINGS_MODULE) names a Django project, but Django is "
            "not installed here: pip install 'due[django]'"
        ) from None
    django.setup()
    from due.contrib.django import configuration, due_app

    return due_app(configuration.backend_alias())
