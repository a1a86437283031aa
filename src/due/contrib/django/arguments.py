"""A Django task's arguments, taken as Django's own backends take them.

Django's `TaskResult` holds its arguments in JSON's types
(`django.utils.json.normalize_json`): a tuple or a range becomes a list, any
mapping a dict, bytes the text they are in UTF-8, and anything else is refused
with a TypeError ("Unsupported type"). DueBackend does the same before it
writes a job, so a task gets what Django's backends would give it, and what
they refuse is refused at enqueue, the argument named: nothing is written, no
signal sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.utils.json import normalize_json

from due.errors import PayloadError
from due.payload import TOO_DEEP


class ArgumentsNotJSON(PayloadError, TypeError):
    """A Django task was given an argument Django's task API cannot take: a
    TypeError, as Django's contract says (and due's PayloadError)."""


def normalised(
    task: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """`args` and `kwargs` in JSON's types, as Django's backends take them.

    Raises:
        ArgumentsNotJSON: One of them is of no such type, nor converted to one.
        PayloadError: They are nested too deeply to store.
    """
    try:
        return normalize_json(list(args)), normalize_json(dict(kwargs))
    except (TypeError, ValueError) as error:
        raise _culprit(task, args, kwargs) or ArgumentsNotJSON(str(error)) from error
    except RecursionError:
        raise PayloadError(f"arguments of task {task!r} are {TOO_DEEP}") from None


def _culprit(task: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Exception | None:
    """The error that names the first argument Django cannot take."""
    named = [(f"argument {n}", value) for n, value in enumerate(args)]
    named += [(f"argument {name!r}", value) for name, value in kwargs.items()]
    for what, value in named:
        try:
            normalize_json(value)
        except (TypeError, ValueError) as error:
            return ArgumentsNotJSON(
                f"{what} of task {task!r} cannot be given to a Django task ({error}): "
                "pass JSON's types, str, int, float, bool, None, and lists and dicts "
                "of them (a datetime as its isoformat(), say)"
            )
    return None
