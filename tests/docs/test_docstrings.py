"""Every public function and method says what it takes and what it gives back.

ruff's pydocstyle rules make every public name carry a docstring; this holds
the public API's callables (due.__all__'s classes, due.testing) to the Google
sections Sphinx shows: an `Args:` entry for each parameter, and `Returns:` (or
`Yields:`) unless it returns None. The members that only the worker and the CLI
use, which the API reference leaves out, are left out here too.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import due
import due.testing

PLUMBING = {
    "App": {"piece_jobs", "completion_spec", "alert_rules"},
    "Task": {"call_arguments", "canonical_arguments", "check_arguments", "stored_redaction"},
    "Context": {"for_job", "stop_writing", "progress_json"},
}
"""As docs/reference/api.md's :exclude-members: (properties are not callables)."""
CONSTRUCTED = {"App", "Retry", "FakeClock"}
"""Classes users construct: their docstring documents the constructor's parameters."""


def public_callables() -> Iterator[tuple[str, Callable[..., Any], str]]:
    """(name, callable, its docstring) for every public function and method."""
    for name in due.__all__:
        thing = getattr(due, name)
        if not inspect.isclass(thing) or issubclass(thing, BaseException):
            continue
        if name in CONSTRUCTED:
            yield name, thing.__init__, inspect.getdoc(thing) or ""
        for member, value in vars(thing).items():
            if member.startswith("_") or member in PLUMBING.get(name, set()):
                continue
            function = value.__func__ if isinstance(value, classmethod | staticmethod) else value
            if inspect.isfunction(function):
                yield f"{name}.{member}", function, inspect.getdoc(function) or ""
    for name in ("drain", "adrain"):
        function = getattr(due.testing, name)
        yield f"due.testing.{name}", function, inspect.getdoc(function) or ""


def documented_parameters(docstring: str) -> set[str]:
    section = re.search(r"^Args:\n((?:    .*\n?|\n)*)", docstring, re.MULTILINE)
    if section is None:
        return set()
    return {m.lstrip("*") for m in re.findall(r"^    (\**\w+):", section.group(1), re.MULTILINE)}


def problems() -> Iterator[str]:
    for name, function, docstring in public_callables():
        signature = inspect.signature(function)
        parameters = {p for p in signature.parameters if p not in ("self", "cls")}
        missing = parameters - documented_parameters(docstring)
        if missing:
            yield f"{name}: no Args entry for {', '.join(sorted(missing))}"
        returns = signature.return_annotation
        gives = function.__name__ != "__init__" and returns not in ("None", None)
        if gives and not re.search(r"^(Returns|Yields):$", docstring, re.MULTILINE):
            yield f"{name}: returns {returns} but says nothing of it under Returns:"


def test_every_public_callable_documents_its_parameters_and_result() -> None:
    assert list(problems()) == []


def test_the_check_sees_a_missing_entry() -> None:
    def undocumented(job_id: int) -> int:
        """Something."""
        return job_id

    assert documented_parameters(inspect.getdoc(undocumented) or "") == set()
    assert documented_parameters("Args:\n    job_id: The id.\n    *args: More.\n") == {
        "job_id",
        "args",
    }
