"""Finding jobs by their arguments (`args_contains`), on every backend: JSON
containment on PostgreSQL, each key with an equal value on SQLite; the
bulk actions and `due jobs` take it as every other filter."""

from __future__ import annotations

from typing import Any

import pytest

import due


@pytest.fixture
def jobs(app: due.App) -> dict[str, int]:
    @app.task(name="export")
    def export(
        customer_id: Any = None, kind: str = "", customer: Any = None, note: Any = None
    ) -> None: ...

    @app.task(name="export_spec")
    def export_spec(spec: Any, limit: int = 0) -> None: ...

    made = {
        "42 csv": export.enqueue(customer_id=42, kind="csv"),
        "42 pdf": export.enqueue(customer_id=42, kind="pdf"),
        "7": export.enqueue(customer_id=7),
        "42 as text": export.enqueue(customer_id="42"),
        "42.0": export.enqueue(customer_id=42.0),
        "true": export.enqueue(customer_id=True),
        "nested": export.enqueue(customer={"id": 42, "name": "Ada"}),
        "no note": export.enqueue(customer_id=9, note=None),
        "spec": export_spec.enqueue({"customer_id": 42, "kind": "csv"}),
        "42 positional": export_spec.enqueue(42, limit=42),
    }
    return {name: job.id for name, job in made.items()}


def found(app: due.App, jobs: dict[str, int], wanted: Any) -> set[str]:
    names = {job_id: name for name, job_id in jobs.items()}
    return {names[job.id] for job in app.jobs(args_contains=wanted)}


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ({"customer_id": 42}, {"42 csv", "42 pdf", "42.0", "spec"}),
        ({"customer_id": 42, "kind": "csv"}, {"42 csv", "spec"}),  # all keys, in one argument
        ('{"customer_id": "42"}', {"42 as text"}),  # JSON text, a string is not a number
        ({"customer_id": True}, {"true"}),  # nor is true 1
        ({"note": None}, {"no note"}),
        ({"limit": 42}, {"42 positional"}),
        ({"customer": {"id": 42, "name": "Ada"}}, {"nested"}),
        ({"customer_id": 1234}, set()),
    ],
)
def test_a_job_is_found_by_what_its_arguments_hold(
    app: due.App, jobs: dict[str, int], wanted: Any, expected: set[str]
) -> None:
    assert found(app, jobs, wanted) == expected


def test_a_nested_object_is_contained_on_postgresql_and_equal_as_a_whole_on_sqlite(
    app: due.App, jobs: dict[str, int], backend: str
) -> None:
    part = found(app, jobs, {"customer": {"id": 42}})
    assert part == ({"nested"} if backend == "postgres" else set())
    assert found(app, jobs, {}) == set(jobs)  # an empty object holds in every job


def test_bulk_actions_take_it_and_act_on_what_it_lists(app: due.App, jobs: dict[str, int]) -> None:
    listed = {job.id for job in app.jobs(args_contains={"customer_id": 42})}
    assert app.cancel_many(args_contains={"customer_id": 42}, by="support", batch_size=2) == 4
    assert {job.id for job in app.jobs(state="cancelled")} == listed
    (action,) = app.history()
    assert action.action == "cancel 4 jobs where args_contains='{\"customer_id\":42}'"


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        ("[42]", "args_contains must be a JSON object"),
        ("{customer_id: 42}", "args_contains: '{customer_id: 42}' is not JSON"),
        ({"when": object()}, "args_contains cannot be written as JSON"),
        ("[" * 5000, "is not JSON"),  # nested deeper than JSON is read: no RecursionError
    ],
)
def test_what_is_not_a_json_object_is_refused(
    app: due.App, jobs: dict[str, int], wanted: Any, message: str
) -> None:
    with pytest.raises(due.ConfigurationError, match=message):
        app.jobs(args_contains=wanted)
