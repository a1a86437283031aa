"""What the templates print: times, durations, JSON, sparklines, schedules in words.

Every value here ends in a Jinja2 template with autoescape on: nothing built
here is marked safe, so a job's argument `<script>` prints as text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cron_descriptor import get_description  # type: ignore[import-untyped]

from due.core.schedules import Schedule
from due.visibility.alerts import QueueThresholds


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
