"""The metrics and alerts page lists exactly what the code serves and raises.

The metrics are read from a real scrape (the collector `due metrics` serves)
of an app on SQLite in which every family has a sample: a queue, a task that
ran, a schedule that succeeded, a limit. The alerts are read from visibility/alerts.py
itself: every `Alert(severity, kind, ...)` it builds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import due
import due.visibility.alerts
from due.core.stats import DURATION_BUCKETS, Outcome
from due.testing import FakeClock, drain
from due.visibility.metrics import QUEUE_STATES, RECYCLE_REASONS, registry_for
from tests.docs.reference_pages import REFERENCE, names, section, table

PAGE = REFERENCE / "metrics.md"


def table_rows(title: str) -> dict[str, tuple[str, str]]:
    """{name in the first column: (second column, third)} of a section's table."""
    return {names(row[0])[0]: (row[1], row[2]) for row in table(section("metrics", title))}


def values_of(cell: str, label: str) -> list[str]:
    """The values listed after a label: `state` (queued, due, ...)."""
    match = re.search(rf"`{label}` \(([^)]*)\)", cell)
    assert match, f"the values of {label!r} are not listed: {cell!r}"
    return [value.strip() for value in match.group(1).split(",")]


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, list[str]]]:
    """{metric name as exposed: (type, label names)} from one scrape."""
    folder = tmp_path_factory.mktemp("metrics")
    with due.App(f"sqlite:///{folder / 'due.db'}", clock=FakeClock()) as app:
        app.limit("reports", concurrency=2)  # stored: the limits' families get samples

        @app.task(queue="reports", limits=["reports"])
        def build() -> None: ...

        app.schedule("hourly", every="1h", task=build)
        app.migrate()
        app.sync_schedules()
        app.trigger_schedule("hourly")
        assert drain(app).succeeded  # a success: the schedule's family gets a sample
        return dict(_families(app))


def _families(app: due.App) -> Iterator[tuple[str, tuple[str, list[str]]]]:
    for family in registry_for(app).collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        assert family.samples, f"{name} has no sample: the scene must give it one"
        labels = {key for sample in family.samples for key in sample.labels if key != "le"}
        yield name, (family.type, sorted(labels))


def test_every_metric_served_is_on_the_page_with_its_type_and_labels(
    scraped: dict[str, tuple[str, list[str]]],
) -> None:
    page = {name: (kind, sorted(names(labels))) for name, (kind, labels) in
            table_rows("Metrics").items()}  # fmt: skip
    assert page == scraped


def test_the_listed_label_values_are_the_codes() -> None:
    rows = table_rows("Metrics")
    assert values_of(rows["due_jobs_total"][1], "outcome") == [o.value for o in Outcome]
    assert values_of(rows["due_queue_jobs"][1], "state") == list(QUEUE_STATES)
    assert values_of(rows["due_alerts"][1], "severity") == ["warning", "critical"]
    assert values_of(rows["due_worker_recycles_total"][1], "reason") == list(RECYCLE_REASONS)


def test_the_duration_buckets_are_the_codes() -> None:
    text = PAGE.read_text()
    listed = re.search(r"The duration buckets, in seconds: ([\d., \n]+)\.", text)
    assert listed, "the page does not list the duration buckets"
    assert [float(b) for b in listed.group(1).replace("\n", " ").split(", ")] == list(
        DURATION_BUCKETS
    )


def raised_alerts() -> dict[str, set[str]]:
    """{kind: severities} of every Alert(...) that visibility/alerts.py builds."""
    tree = ast.parse(Path(due.visibility.alerts.__file__).read_text())
    kinds: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Alert":
            severity, kind = node.args[0], node.args[1]
            assert isinstance(kind, ast.Constant), ast.unparse(node)
            assert isinstance(kind.value, str), ast.unparse(node)
            levels = {n.attr.lower() for n in ast.walk(severity) if isinstance(n, ast.Attribute)}
            kinds.setdefault(kind.value, set()).update(levels)
    return kinds


def test_every_alert_raised_is_on_the_page_with_its_severities() -> None:
    page = {kind: {s.strip() for s in severity.split(",")} for kind, (severity, _) in
            table_rows("Alerts").items()}  # fmt: skip
    assert page == raised_alerts()
