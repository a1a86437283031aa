"""A `due` command that a page shows but does not run, checked as far as it can
be without running it: its subcommand's `--help` works, and click parses the
line (every option exists, every value has its type, no argument is missing).

Shell around the command is allowed: `VAR=value due ...`, `exec due ...`,
`.../venv/bin/due ...`, pipes and `&&` after it. In a block that is not a
shell session (a systemd unit, a Dockerfile, a manifest) a command written on
one line, or as a JSON array (`["due", "worker", ...]`), is found too.
"""

from __future__ import annotations

import json
import re
import shlex
import warnings

import click
from click.testing import CliRunner

from due.cli import main
from due.cli.common import Settings

SEPARATORS = frozenset({"|", "||", "&&", ";", "&"})
REDIRECTION = re.compile(r"^\d?(?:>>?|<|&>)(?:&\d)?$")
"""A redirection whose target is the next word (`>`, `2>>`); `2>&1` stands alone."""
REDIRECTION_WITH_TARGET = re.compile(r"^\d?(?:>>?|<|&>)\S+$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
JSON_ARRAY = re.compile(r"\[\s*\"(?:[^\"]*/)?due\".*?\]")
DUE_WORD = re.compile(r"(?:^|[\s=/\"'])due\s+(?P<rest>[a-z].*)$")


def due_commands_in_shell(line: str) -> list[list[str]]:
    """The `due` commands of one shell line, each as its arguments after `due`."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError as error:
        raise AssertionError(f"cannot split {line!r} as a shell line: {error}") from None
    found: list[list[str]] = []
    segment: list[str] = []
    redirected = False
    for word in [*words, ";"]:
        if redirected or REDIRECTION_WITH_TARGET.match(word):
            redirected = False
            continue
        if REDIRECTION.match(word):
            redirected = not word.endswith(("&1", "&2"))
            continue
        if word not in SEPARATORS:
            segment.append(word)
            continue
        while segment and (ASSIGNMENT.match(segment[0]) or segment[0] in ("exec", "sudo")):
            segment.pop(0)
        if segment and (segment[0] == "due" or segment[0].endswith("/due")):
            found.append(segment[1:])
        segment = []
    return found


def due_commands_in_text(line: str) -> list[list[str]]:
    """`due` commands in a line of a file that is not a shell session."""
    array = JSON_ARRAY.search(line)
    if array:
        words = json.loads(array.group(0))
        return [[str(word) for word in words[1:]]]
    command = DUE_WORD.search(line)
    if command and command["rest"].split()[0] in main.commands:
        return due_commands_in_shell("due " + command["rest"])
    return []


def check_parses(args: list[str]) -> None:
    """Fail with click's message unless `due ARGS` parses and its --help works."""
    path = _command_path(args)
    helped = CliRunner().invoke(main, [*path, "--help"])
    assert helped.exit_code == 0, f"`due {' '.join(path)} --help` failed:\n{helped.output}"
    try:
        _parse(args)
    except click.exceptions.Exit as done:
        assert done.exit_code == 0, f"`due {shlex.join(args)}` exits {done.exit_code}"
    except click.ClickException as error:
        raise AssertionError(f"`due {shlex.join(args)}` does not parse: {error}") from None


def _command_path(args: list[str]) -> list[str]:
    """The subcommand names at the start of `args` (`schedule add`), after the
    options `due` itself takes before its command."""
    group: click.Command = main
    path: list[str] = []
    words = iter(args)
    for word in words:
        if not isinstance(group, click.Group):
            break
        if word in ("--app", "--url"):
            next(words, None)
            continue
        if word.startswith("-"):
            continue
        sub = group.commands.get(word)
        if sub is None:
            break
        path.append(word)
        group = sub
    return path


def _parse(args: list[str]) -> None:
    command: click.Command = main
    context: click.Context | None = None
    rest, name = list(args), "due"
    while True:
        context = command.make_context(
            name, rest, parent=context, obj=Settings() if context is None else None
        )
        if not isinstance(command, click.Group):
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*context.protected_args, *context.args]
        if not rest:
            return
        found, sub, rest = command.resolve_command(context, rest)
        assert found is not None and sub is not None
        name, command = found, sub
