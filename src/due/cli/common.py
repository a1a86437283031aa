"""What every `due` command shares: loading the app, printing, reporting errors."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from rich.console import Console

from due.app import App
from due.errors import ConfigurationError, DueError

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
errors = Console(stderr=True)


def load_app(spec: str) -> App:
    """Import `module:attribute` (from the working directory too) and return the App."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"--app {spec!r}: write it as module:attribute, e.g. myapp:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"--app {spec!r}: cannot import {module_name!r}: {error}"
        ) from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ConfigurationError(
            f"--app {spec!r}: {module_name}.{attribute} is {type(app).__name__}, not a due.App"
        )
    return app


class Settings:
    def __init__(self, url: str | None, app_spec: str | None) -> None:
        self.url = url
        self.app_spec = app_spec
        self._app: App | None = None

    @property
    def app(self) -> App:
        if self._app is None:
            if self.app_spec is None:
                self._app = App(self.url)
            else:
                self._app = load_app(self.app_spec)
                if self.url and self.url != self._app.url:
                    raise ConfigurationError(
                        f"--app {self.app_spec} uses database {self._app.url!r} but --url "
                        f"(or DUE_DATABASE_URL) says {self.url!r}; give one"
                    )
        return self._app


def reports_errors(command: F) -> F:
    """Print DueErrors as one clear line and exit 1, instead of a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except DueError as error:
            errors.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def time_text(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""
