"""The `--json` page shows every document the commands print, with their keys.

Each example on docs/reference/json.md comes from tests/docs/json_scene.py's
small world; here every command on the page runs on that world again, and what
it prints must have the example's keys, all the way down (lists by their first
item). A command with a `--json` option that the page does not show fails too.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from typing import Any

import click
import pytest

from due.cli import main
from tests.docs.json_scene import build, commands, document
from tests.docs.reference_pages import REFERENCE

ALIASES = {"schedule list": "schedules", "limit list": "limit"}
"""Commands that print another's document (the page says so)."""
EXAMPLE = re.compile(r"^### `due (.+?)`\n\n```json\n(.*?)\n```", re.MULTILINE | re.DOTALL)


def examples() -> list[tuple[str, Any]]:
    text = (REFERENCE / "json.md").read_text()
    return [(command, json.loads(example)) for command, example in EXAMPLE.findall(text)]


def shape(value: Any) -> Any:
    """The keys of a document, all the way down; a list by its first item."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return None


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    return build(tmp_path_factory.mktemp("json"))


def test_the_page_shows_the_scenes_commands(world: tuple[str, int]) -> None:
    _, job_id = world
    assert sorted(command for command, _ in examples()) == sorted(
        " ".join(c) for c in commands(job_id)
    )


@pytest.mark.parametrize("command, example", examples(), ids=[c for c, _ in examples()])
def test_each_example_has_the_keys_the_command_prints(
    world: tuple[str, int], command: str, example: Any
) -> None:
    url, _ = world
    assert shape(example) == shape(document(url, shlex.split(command)))


def json_commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[str]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from json_commands(command, (*path, name))
        elif any(param.name == "as_json" for param in command.params):
            yield " ".join((*path, name))


def test_every_command_with_json_output_is_on_the_page() -> None:
    shown = {" ".join(c for c in shlex.split(command) if not c.startswith("-") and
             not c.isdigit() and c not in ("monthly-report", "failed", "24h"))
             for command, _ in examples()}  # fmt: skip
    assert {ALIASES.get(name, name) for name in json_commands(main)} <= shown
