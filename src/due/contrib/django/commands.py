"""`manage.py due_worker`, `due_status`, `due_check`: the `due` commands of the
same names, on the project's App, with every option of theirs."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand

from due.contrib.django.cli import APP_SPEC


class DueCommand(BaseCommand):  # type: ignore[misc]
    """A `manage.py` command that is a `due` command: its options are due's
    (`manage.py due_worker --help` lists them)."""

    due_command: tuple[str, ...] = ()

    def run_from_argv(self, argv: list[str]) -> NoReturn:
        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        run_due([*self.due_command, *self.arguments(without_django_options(argv[2:]))], prog)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs="*")

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        """Django's parser, passing every argument through to due's command:
        `call_command("due_status", "--json")` parses as `due status --json`."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parse_django_s = parser.parse_args

        def parse_args(args: Any = None, namespace: Any = None) -> argparse.Namespace:
            parsed: argparse.Namespace = parse_django_s([], namespace)
            parsed.args = [str(argument) for argument in args or ()]
            return parsed

        parser.parse_args = parse_args
        return parser

    def handle(self, *args: Any, **options: Any) -> None:  # call_command(...)
        try:
            run_due([*self.due_command, *self.arguments(list(args))], f"manage.py {self.name}")
        except SystemExit as done:
            if done.code:
                raise

    def print_help(self, prog_name: str, subcommand: str) -> None:
        with contextlib.suppress(SystemExit):  # click exits after its help
            run_due([*self.due_command, "--help"], f"{prog_name} {subcommand}")

    @property
    def name(self) -> str:
        return self.__module__.rpartition(".")[2]

    def arguments(self, given: list[str]) -> list[str]:
        return given


def run_due(arguments: list[str], prog: str) -> NoReturn:
    """Run `due --app <the project's App> <arguments>` in this process."""
    from due.cli.main import main

    # A worker with --processes starts its children as `python -m due` with
    # these arguments: they find the project as this process did.
    sys.argv = ["due", "--app", APP_SPEC, *arguments]
    project = os.path.abspath(sys.path[0] or os.getcwd())
    paths = os.environ.get("PYTHONPATH", "")
    if project not in paths.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (project, paths) if p)
    main.main(args=sys.argv[1:], prog_name=prog)
    raise SystemExit(0)  # main exits itself; this is for type checkers


DJANGO_OPTIONS = ("--settings", "--pythonpath")
"""Options every manage.py command takes, which Django has already applied."""


def without_django_options(given: list[str]) -> list[str]:
    """The arguments without Django's own options (`--settings mysite.prod`)."""
    kept: list[str] = []
    arguments = iter(given)
    for argument in arguments:
        if argument in DJANGO_OPTIONS:
            next(arguments, None)
        elif not argument.startswith(tuple(f"{option}=" for option in DJANGO_OPTIONS)):
            kept.append(argument)
    return kept


def with_backend_queues(given: list[str]) -> list[str]:
    """A worker started without -q serves the backend's QUEUES (Django's setting)."""
    if any(a in ("-q", "--queue") or a.startswith(("--queue=", "-q")) for a in given):
        return given
    from django.tasks import task_backends

    from due.contrib.django import configuration

    queues = sorted(task_backends[configuration.backend_alias()].queues)
    return [*(f"--queue={queue}" for queue in queues), *given]
