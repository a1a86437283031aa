"""What every `due` command shares: where the app comes from, and reporting errors.

`--app` and `--url` (or `DUE_APP`, `DUE_DATABASE_URL`) are accepted before the
command and after it, on every command: `due worker --app myapp:app` and
`due --app myapp:app worker` are the same. A value given on the command line
wins over the environment; the same option given twice on the command line
with two different values is refused rather than guessed.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.text import Text

from due.app import App
from due.cli.output import errors
from due.errors import ConfigurationError, DueError
from due.redaction import redact_url

F = TypeVar("F", bound=Callable[..., Any])
APP_HELP = "Your app, as module:attribute (or $DUE_APP)."
DJANGO_HELP = (
    "A Django project's settings module: the App of its due task backend "
    "(or $DJANGO_SETTINGS_MODULE, when neither --app nor --url is given)."
)
DJANGO_APP_SPEC = "due.contrib.django.cli:app"
"""The App of a Django project (due.contrib.django; named, not imported: the
core imports no framework)."""
URL_HELP = "Database URL (or $DUE_DATABASE_URL; default ./due.db)."


def load_app(spec: str) -> App:
    """Import `module:attribute` (from the working directory too) and return the App.

    The working directory is searched last, after the standard library and
    what is installed (uvicorn and gunicorn put it first): a module left
    there under an installed one's name (a psycopg.py in a shared folder)
    must not run in its place. An app whose module shares a name with an
    installed one is found through PYTHONPATH=. instead."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"--app {spec!r}: write it as module:attribute, e.g. myapp:app")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(_not_imported(spec, module_name, error)) from None
    if not hasattr(module, attribute):
        raise ConfigurationError(f"--app {spec!r}: {module_name} has no attribute {attribute!r}")
    app = getattr(module, attribute)
    if not isinstance(app, App):
        raise ConfigurationError(
            f"--app {spec!r}: {module_name}.{attribute} is of type {type(app).__name__}, "
            "not a due.App"
        )
    return app


def _not_imported(spec: str, module_name: str, error: ImportError) -> str:
    """Why `--app` could not be imported: the app's module is not on the path
    (say where Python looked, and how to point it there), or something the
    module imports is missing."""
    missing = getattr(error, "name", None)
    if not isinstance(error, ModuleNotFoundError) or missing is None:
        return f"--app {spec!r}: cannot import {module_name!r}: {error}"
    if not module_name.startswith(missing) or module_name[len(missing) :][:1] not in ("", "."):
        return (
            f"--app {spec!r}: {module_name!r} was found, but importing it failed: {error} "
            "(install what it imports, in the environment due runs in)"
        )
    looked = ", ".join(path or "''" for path in sys.path[:3])
    environment = os.environ.get("PYTHONPATH")
    return (
        f"--app {spec!r}: no module named {missing!r} in the current directory "
        f"({os.getcwd()}) or on Python's path (PYTHONPATH="
        f"{environment if environment else 'not set'}; sys.path starts {looked}, ...); "
        f"run due from the directory that holds {missing.replace('.', '/')}.py, or set "
        "PYTHONPATH to it (PYTHONPATH=/path/to/project due ...)"
    )


class Settings:
    """The app and database a command works on, gathered from every place they may be given."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.app_spec: str | None = None
        self.django: str | None = None
        self._from_command_line: dict[str, str] = {}
        self._app: App | None = None

    def give(self, option: str, value: str | None, *, from_command_line: bool) -> None:
        """Record `--app`/`--url` (option "app_spec" or "url") from one place."""
        if value is None:
            return
        earlier = self._from_command_line.get(option)
        if from_command_line and earlier is not None and earlier != value:
            flag = {"app_spec": "--app", "url": "--url"}.get(option, f"--{option}")
            raise click.UsageError(
                f"{flag} is given twice, as {earlier!r} and as {value!r}; give it once"
            )
        if from_command_line:
            self._from_command_line[option] = value
        setattr(self, option, value)

    @property
    def app(self) -> App:
        if self._app is None:
            spec = self._app_spec()
            if spec is None:
                self._app = App(self.url)
            else:
                self._app = load_app(spec)
                if self.url and self.url != self._app.url:
                    raise ConfigurationError(
                        f"--app {spec} uses database {redact_url(self._app.url)!r} "
                        f"but --url (or DUE_DATABASE_URL) says {redact_url(self.url)!r}; "
                        "give one"
                    )
        return self._app

    def require_app(self, command: str) -> App:
        """The user's app, for commands that need its tasks (not only its database)."""
        if not self._app_spec():
            raise ConfigurationError(
                f"{command} needs your app: --app module:attribute (or DUE_APP), "
                "or --django your.settings"
            )
        return self.app

    @property
    def names_an_app(self) -> bool:
        """Whether the command was given an app (with its tasks), not only a database."""
        return self._app_spec() is not None

    def _app_spec(self) -> str | None:
        """--app's; or a Django project's, by --django or, when neither --app nor
        --url is given, by DJANGO_SETTINGS_MODULE."""
        if self.django is not None:
            if self.app_spec is not None:
                raise ConfigurationError(
                    f"--django {self.django} and --app {self.app_spec} both name the app; give one"
                )
            os.environ["DJANGO_SETTINGS_MODULE"] = self.django
            return DJANGO_APP_SPEC
        if self.app_spec is None and self.url is None and os.environ.get("DJANGO_SETTINGS_MODULE"):
            return DJANGO_APP_SPEC
        return self.app_spec

    def close(self) -> None:
        """Close what the command opened (a pool left open delays the exit on 3.13)."""
        if self._app is not None:
            self._app.close()


def _given_after_the_command(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None and param.name is not None:
        ctx.find_object(Settings).give(param.name, value, from_command_line=True)  # type: ignore[union-attr]


def _location_options() -> list[click.Option]:
    return [
        click.Option(
            ["--app", "app_spec"],
            help=APP_HELP,
            expose_value=False,
            callback=_given_after_the_command,
        ),
        click.Option(
            ["--url"], help=URL_HELP, expose_value=False, callback=_given_after_the_command
        ),
        click.Option(
            ["--django"],
            metavar="SETTINGS",
            help=DJANGO_HELP,
            expose_value=False,
            callback=_given_after_the_command,
        ),
    ]


class DueGroup(click.Group):
    """A command group whose every command also takes `--app` and `--url`."""

    group_class = type  # subgroups (`due schedule ...`) are DueGroups too

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.params.extend(_location_options())
        super().add_command(cmd, name)


def reports_errors(command: F) -> F:
    """Print DueErrors as one clear line and exit 1, instead of a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except DueError as error:
            errors.print(Text("error:", style="red"), str(error), soft_wrap=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]
