"""What the templates print: times, durations, JSON, sparklines, schedules in words.

Every value here ends in a Jinja2 template with autoescape on: nothing built
here is marked safe, so a job's argument `<script>` prints as text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cron_descriptor import get_description  # type: ignore[import-untyped]

from due.core.schedules import Schedule
from due.visibility.alerts import QueueThresholds
from due.workflows import StepStatus, WorkflowStatus


def when(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def seconds(value: float | None) -> str:
    """A duration for people: 850 ms, 12.5 s, 4 min 10 s, 3 h 05 min."""
    if value is None:
        return ""
    if math.isinf(value):
        return "more than 12 h"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return ""
    delta = (now - moment).total_seconds()
    return f"in {seconds(-delta)}" if delta < 0 else f"{seconds(delta)} ago"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=True)


def age_level(age: float | None, thresholds: QueueThresholds) -> str:
    """ok, warning or critical: the queue's oldest due age against its thresholds."""
    if age is None or age < thresholds.oldest_due_warning:
        return "ok"
    return "critical" if age >= thresholds.oldest_due_critical else "warning"


def sparkline(counts: Sequence[int], width: int = 120, height: int = 24) -> str:
    """The points of an SVG polyline over `counts` (one per minute, oldest first)."""
    if not counts:
        return ""
    top = max(*counts, 1)
    step = width / max(len(counts) - 1, 1)
    return " ".join(
        f"{index * step:.1f},{height - 1 - (count / top) * (height - 2):.1f}"
        for index, count in enumerate(counts)
    )


def in_words(schedule: Schedule) -> str:
    """The schedule's timing as a sentence: "At 02:00 AM, only on Monday"."""
    timing = schedule.timing
    if timing.every is not None:
        return f"Every {seconds(timing.every)}"
    assert timing.cron is not None
    try:
        return str(get_description(timing.cron))
    except Exception:  # a valid croniter expression the describer does not know (e.g. @hourly)
        return timing.cron


@dataclass(frozen=True)
class Node:
    """A step drawn as a box: its top-left corner and what it says."""

    name: str
    label: str
    job_id: int
    state: str
    layer: int
    x: float
    y: float


@dataclass(frozen=True)
class Edge:
    """A curve from an upstream step's right side to its dependent's left side."""

    upstream: str
    step: str
    path: str


@dataclass(frozen=True)
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    width: float
    height: float
    node_width: float = 168
    node_height: float = 26


NODE_WIDTH, NODE_HEIGHT, LAYER_GAP, ROW_GAP, MARGIN = 168.0, 26.0, 56.0, 10.0, 8.0
LABEL_LENGTH = 22


def workflow_graph(status: WorkflowStatus) -> Graph:
    """The steps laid out by depth: a step's layer (its column) is the longest
    path from a root to it; within a layer, steps sit near the mean row of
    their upstream steps (then in the order they were added)."""
    steps = status.steps
    layers: dict[str, int] = {}
    for name in _topological(steps):
        after = [other for other in steps[name].after if other in steps]
        layers[name] = 1 + max((layers[other] for other in after), default=-1)
    columns: dict[int, list[str]] = {}
    for name in steps:  # the order they were added
        columns.setdefault(layers[name], []).append(name)
    rows: dict[str, int] = {}
    for layer in sorted(columns):
        order = {name: index for index, name in enumerate(columns[layer])}
        keys = {name: _mean_row(steps[name], rows, order) for name in columns[layer]}
        columns[layer].sort(key=keys.__getitem__)
        for index, name in enumerate(columns[layer]):
            rows[name] = index
    place = {
        name: (
            MARGIN + layers[name] * (NODE_WIDTH + LAYER_GAP),
            MARGIN + rows[name] * (NODE_HEIGHT + ROW_GAP),
        )
        for name in steps
    }
    nodes = [
        Node(
            name,
            name if len(name) <= LABEL_LENGTH else name[: LABEL_LENGTH - 1] + "…",
            step.job_id,
            step.state.value,
            layers[name],
            *place[name],
        )
        for name, step in steps.items()
    ]
    edges = []
    for name, step in steps.items():
        x2, y2 = place[name][0], place[name][1] + NODE_HEIGHT / 2
        for other in step.after:
            if other not in place:
                continue
            x1, y1 = place[other][0] + NODE_WIDTH, place[other][1] + NODE_HEIGHT / 2
            bend = (x2 - x1) / 2
            path = (
                f"M{x1:.0f},{y1:.0f} C{x1 + bend:.0f},{y1:.0f} "
                f"{x2 - bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
            )
            edges.append(Edge(other, name, path))
    width = (
        MARGIN * 2 + (max(layers.values(), default=0) + 1) * (NODE_WIDTH + LAYER_GAP) - LAYER_GAP
    )
    height = (
        MARGIN * 2
        + max((len(names) for names in columns.values()), default=1) * (NODE_HEIGHT + ROW_GAP)
        - ROW_GAP
    )
    return Graph(nodes, edges, width, height, NODE_WIDTH, NODE_HEIGHT)


def _mean_row(
    step: StepStatus, rows: Mapping[str, int], order: Mapping[str, int]
) -> tuple[float, int]:
    """Where a step sorts in its layer: the mean row of its upstream steps, then
    the order it was added in."""
    upstream = [rows[other] for other in step.after if other in rows]
    return (sum(upstream) / len(upstream) if upstream else -1.0, order[step.name])


def _topological(steps: Mapping[str, StepStatus]) -> list[str]:
    """The step names, each after its upstream steps (the store keeps the order
    they were added, which already is one; this does not rely on it)."""
    seen: set[str] = set()
    ordered: list[str] = []
    for root in steps:
        stack = [(root, False)]
        while stack:
            name, expanded = stack.pop()
            if expanded:
                ordered.append(name)
                continue
            if name in seen or name not in steps:
                continue
            seen.add(name)
            stack.append((name, True))
            stack.extend((other, False) for other in reversed(steps[name].after))
    return ordered
