"""The configuration page lists every setting the code reads, and nothing else.

Each table is held to its source: the environment variables to every `DUE_...`
name in src/due, the URL parameters to the pooler's, the App's, the stores',
the tasks' and the enqueue options to the signatures that take them.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import due
from due.store.postgres.backend import PostgresBackend
from due.store.postgres.pooler import LISTEN_URL_PARAMETER, POOLER_PARAMETER
from due.store.sqlite.backend import SQLiteBackend
from due.task import ENQUEUE_OPTIONS
from tests.docs.reference_pages import names, section, table

SOURCE = Path(due.__file__).resolve().parent


def first_column(title: str, level: int = 2) -> list[str]:
    return [name for row in table(section("configuration", title, level)) for name in
            names(row[0])]  # fmt: skip


def keyword_parameters(function: object, leave_out: tuple[str, ...] = ()) -> set[str]:
    parameters = inspect.signature(function).parameters.values()  # type: ignore[arg-type]
    return {p.name for p in parameters if p.name not in ("self", *leave_out)}


def test_every_environment_variable_due_reads_is_listed() -> None:
    read = {
        name
        for path in SOURCE.rglob("*.py")
        for name in re.findall(r"[\"'](DUE_[A-Z_]+)[\"']", path.read_text())
    }
    assert set(first_column("Environment variables")) == read


def test_the_url_parameters_are_the_poolers() -> None:
    listed = first_column("due's own URL parameters", level=3)
    assert listed == [POOLER_PARAMETER, LISTEN_URL_PARAMETER]


def test_the_app_options_are_its_parameters() -> None:
    assert set(first_column("The App")) == keyword_parameters(due.App)


def test_the_store_options_are_the_stores_parameters() -> None:
    rows = table(section("configuration", "The App").split("`store_options`, per store:")[1])
    listed = {(row[0], names(row[1])[0]) for row in rows}
    own = ("url", "clock", "pooler", "listen_url")  # given by the App itself
    expected = {("PostgreSQL", name) for name in keyword_parameters(PostgresBackend, own)}
    expected |= {("SQLite", name) for name in keyword_parameters(SQLiteBackend, own)}
    assert listed == expected


def test_the_task_options_are_app_task_s_parameters() -> None:
    assert set(first_column("Task options")) == keyword_parameters(due.App.task, ("fn",))


def test_the_enqueue_options_are_task_options_s() -> None:
    assert set(first_column("Enqueue options")) == set(ENQUEUE_OPTIONS)
