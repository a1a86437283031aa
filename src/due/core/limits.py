"""Limits: what they are, how their numbers are written, and who may start.

A limit caps the jobs counted against it (or against one of its keys):
`concurrency` of them running at any moment, `rate` of them starting in any
window of `period` seconds (a sliding window). The decision for a claim's
candidates is made here, on numbers the store read under the keys' locks.

A rate speaks of the handlers' starts, as the service they call sees them.
A claim counts a start at its instant (the database's time once the keys are
locked), but a handler begins a little later: the claim's reply travels, the
worker starts it. So a start counts for its window and the tolerance after
it (`start_tolerance`), and a worker starts a handler only within that
tolerance of its counted start, or hands the job back unstarted: any window
of `period` seconds of handler starts then lies within a window of period +
tolerance of counted ones, which holds at most `rate`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from due.durations import to_seconds
from due.errors import ConfigurationError
from due.shown_arguments import HIDDEN, MIN_SCRUBBED_LENGTH, scrubbed

WHOLE = ""
"""The key of a limit named without a key function: the whole limit."""
HIDDEN_KEY_MARK = HIDDEN + ":"
"""What a key made from a redacted argument is stored after (`hidden_key`):
the claim counts jobs by the whole stored key, as by any other, and
everything that shows a key shows such a one as `•••` (`shown_key`)."""
MAX_NAME_LENGTH = 100
MAX_KEY_LENGTH = 255
MAX_PERIOD_SECONDS = 86_400.0
"""A rate's period, at most a day: the log of its starts is kept that long."""
MAX_COUNT = 1_000_000
START_TOLERANCE_SHARE = 0.05
"""How late after its counted start a rate-limited job's handler may begin, as
a share of the rate's period (50 ms of a second); a job whose handler could
not begin by then is handed back unstarted. The rate's window is longer by as
much, so what a worker may start late never crowds the next window."""
MAX_START_TOLERANCE_SECONDS = 1.0
"""The tolerance's cap (a worker that starts a handler a second after its
claim is slow, whatever the period)."""
_NAME = re.compile(r"[A-Za-z0-9_.:\-]+")
_RATE = re.compile(r" *([0-9]+) */ *([0-9]*) *([smh]) *")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class Limit:
    """A limit's numbers: at most `concurrency` running, at most `rate` starts
    in any window of `period` seconds (either may be None: no such cap)."""

    name: str
    concurrency: int | None = None
    rate: int | None = None
    period: float | None = None

    @property
    def rate_text(self) -> str | None:
        """The rate as it is written ("100/s", "5/10m"), or None."""
        if self.rate is None or self.period is None:
            return None
        return f"{self.rate}/{describe_period(self.period)}"

    def describe(self) -> str:
        """Its numbers in words.

        Returns:
            Such as "concurrency 2, rate 100/s", or "no caps".
        """
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.rate_text is not None:
            parts.append(f"rate {self.rate_text}")
        return ", ".join(parts) or "no caps"


def validate_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        raise ConfigurationError(
            f"limit name {name!r} must be 1-{MAX_NAME_LENGTH} letters, digits, or '_.:-' "
            '(e.g. "stripe", "account-sync")'
        )
    return name


def parse_rate(text: Any, *, limit: str) -> tuple[int, float]:
    """`"100/s"`, `"10/m"`, `"1000/h"`, `"5/10m"` as (starts, period in seconds)."""
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigurationError(
            f"limit {limit!r}: rate={text!r} must be written N/period, a whole number of "
            'starts per s, m or h: "100/s", "10/m", "1000/h" or "5/10m"'
        )
    count, multiple, unit = int(match[1]), int(match[2] or 1), match[3]
    if count < 1 or count > MAX_COUNT:
        raise ConfigurationError(
            f"limit {limit!r}: rate={text!r} must let 1 to {MAX_COUNT:,} jobs start per period"
        )
    period = multiple * _UNITS[unit]
    if period <= 0 or period > MAX_PERIOD_SECONDS:
        raise ConfigurationError(
            f"limit {limit!r}: rate={text!r} has a period of {period:g}s; "
            "it must be more than 0 and at most a day (24h)"
        )
    return count, period


def validate_concurrency(value: Any, *, limit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise ConfigurationError(
            f"limit {limit!r}: concurrency={value!r} must be a whole number from 1 to {MAX_COUNT:,}"
        )
    return value


def build(name: Any, *, rate: Any = None, concurrency: Any = None) -> Limit:
    """A limit from what `app.limit(...)` (or `due limit set`) was given."""
    validate_name(name)
    if rate is None and concurrency is None:
        raise ConfigurationError(
            f'limit {name!r}: give rate= (like "100/s"), concurrency= (a whole number), or both'
        )
    count, period = parse_rate(rate, limit=name) if rate is not None else (None, None)
    slots = validate_concurrency(concurrency, limit=name) if concurrency is not None else None
    return Limit(name, slots, count, period)


def start_tolerance(period: float) -> float:
    """How late after its counted start a handler may begin (seconds), for a
    rate of this period: what the window is longer by."""
    return min(period * START_TOLERANCE_SHARE, MAX_START_TOLERANCE_SECONDS)


def describe_period(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return unit if count == 1 else f"{count}{unit}"
    return f"{seconds:g}s"


def period_of(text: str) -> float:
    """A duration as `due limit set --rate` may write a period ("5m")."""
    return to_seconds(text)


def hidden_key(key: str, secrets: Collection[str]) -> str:
    """`key` as stored: after `HIDDEN_KEY_MARK` when it is one of `secrets`
    (the text of each redacted value of the job's arguments), or holds one
    long enough to look for in any of the forms an error text is scrubbed of."""
    long = [secret for secret in secrets if len(secret) >= MIN_SCRUBBED_LENGTH]
    if key in secrets or scrubbed(key, long) != key:
        return HIDDEN_KEY_MARK + key
    return key


def shown_key(key: str | None) -> str | None:
    """A stored key as due shows it: `•••` for one made from a redacted argument."""
    if key is not None and key.startswith(HIDDEN_KEY_MARK):
        return HIDDEN
    return key


def encode_job_limits(pairs: Sequence[tuple[str, str]]) -> str | None:
    """A job's limits as stored: JSON [[name, key], ...] (None: no limit)."""
    return json.dumps([list(pair) for pair in pairs], ensure_ascii=False) if pairs else None


def decode_job_limits(text: str | None) -> list[tuple[str, str]]:
    if not text:
        return []
    return [(str(name), str(key)) for name, key in json.loads(text)]


# --- the decision of a claim -----------------------------------------------------


@dataclass(slots=True)
class KeyState:
    """One limit key as a claim sees it under its lock."""

    name: str
    key: str
    now: float
    concurrency: int | None
    rate: int | None
    period: float | None
    running: int
    starts: list[list[float]]
    """[instant, count] of the starts in the last window (older ones dropped)."""
    block_version: int = 0
    granted: int = 0
    blocked: bool = False
    rate_blocked: bool = False
    concurrency_blocked: bool = False

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> KeyState:
        now = float(row["now_s"])
        period = None if row["period"] is None else float(row["period"])
        starts = json.loads(row["starts"] or "[]")
        window = None if period is None else period + start_tolerance(period)
        # Claims that waited for a key write after one that began later: in order.
        starts = sorted(e for e in starts if e[0] > now - window) if window is not None else []
        return cls(
            row["name"],
            row["key"],
            now,
            row["concurrency"],
            row["rate"],
            period,
            int(row["running"]),
            starts,
            int(row["block_version"]),
        )

    @property
    def window(self) -> float | None:
        """How long a start counts against the rate: its period and the
        tolerance of a handler's start (None: no rate)."""
        return None if self.period is None else self.period + start_tolerance(self.period)

    @property
    def started_in_window(self) -> int:
        return int(sum(count for _, count in self.starts))

    def why_not(self) -> str | None:
        """Why one more may not start now ("concurrency", "rate"), or None."""
        if self.concurrency is not None and self.running + self.granted >= self.concurrency:
            return "concurrency"
        if self.rate is not None and self.started_in_window + self.granted >= self.rate:
            return "rate"
        return None

    def room(self) -> int:
        """How many more may start now."""
        rooms = [MAX_COUNT]
        if self.concurrency is not None:
            rooms.append(self.concurrency - self.running - self.granted)
        if self.rate is not None:
            rooms.append(self.rate - self.started_in_window - self.granted)
        return max(0, min(rooms))

    def log(self) -> list[list[float]]:
        """The log of starts to write: this claim's starts added."""
        if self.granted and self.period is not None:
            return [*self.starts, [self.now, self.granted]]
        return self.starts

    def opens_at(self) -> float | None:
        """When the rate lets one more start, counting this claim's (None: now,
        or no rate)."""
        window = self.window
        if self.rate is None or window is None:
            return None
        log = self.log()
        excess = sum(count for _, count in log) - (self.rate - 1)
        for instant, count in log:  # oldest first: each leaves the window at instant + window
            if excess <= 0:
                break
            excess -= count
            if excess <= 0:
                return float(instant + window)
        return None

    def next_look(self) -> float | None:
        """When the jobs this claim set waiting should be looked at again (None:
        when a job of the key ends). A job set waiting for a slot is looked at
        again at once, after this claim commits: a job of the key whose end
        committed after this claim counted it running let go of nobody, as
        nobody waited yet (store/limits.py)."""
        if self.concurrency_blocked:
            return self.now
        return self.opens_at() if self.rate_blocked else None


@dataclass(slots=True)
class Decision:
    """What a claim does with its limited candidates."""

    granted: list[int] = field(default_factory=list)
    waiting: list[tuple[int, str, str]] = field(default_factory=list)
    """(job id, limit, key) of the candidates that must wait, and for what."""
    start_by: dict[int, float] = field(default_factory=dict)
    """For each granted job that counts against a rate: the latest instant (the
    database's, seconds) its handler may begin."""


def decide(
    candidates: Iterable[tuple[int, Sequence[tuple[str, str]]]],
    states: Mapping[tuple[str, str], KeyState],
) -> Decision:
    """In claim order, each candidate starts if every key it counts against has
    room; otherwise it waits for the first that has none. A key whose numbers
    are unknown (its limit was never written) caps nothing."""
    decision = Decision()
    for job_id, pairs in candidates:
        full = next(
            (states[pair] for pair in pairs if pair in states and states[pair].why_not()), None
        )
        if full is None:
            for pair in pairs:
                if pair in states:
                    states[pair].granted += 1
            decision.granted.append(job_id)
            deadlines = [
                state.now + start_tolerance(state.period)
                for pair in pairs
                if (state := states.get(pair)) is not None
                and state.rate is not None
                and state.period is not None
            ]
            if deadlines:
                decision.start_by[job_id] = min(deadlines)
            continue
        if full.why_not() == "rate":
            full.rate_blocked = True
        else:
            full.concurrency_blocked = True
        full.blocked = True
        decision.waiting.append((job_id, full.name, full.key))
    return decision


# --- what `due limit`, the dashboard and the metrics show ---------------------------


@dataclass(frozen=True, slots=True)
class LimitKeyOverview:
    """One key of a limit: its running jobs, waiting jobs and recent starts."""

    key: str
    running: int
    waiting: int
    started_in_window: int
    started_total: int


@dataclass(frozen=True, slots=True)
class LimitOverview:
    """A stored limit: the numbers in force (an operator's, or the code's), the
    jobs running against it and waiting for it, and its starts in the current
    window of its rate (summed over its busiest keys)."""

    limit: Limit
    code: Limit
    overridden: bool
    running: int
    waiting: int
    started_in_window: int
    started_total: int
    keys: int
    busiest: tuple[LimitKeyOverview, ...] = ()

    @property
    def name(self) -> str:
        return self.limit.name


def starts_in_window(starts_text: str | None, now: float, period: float | None) -> int:
    if period is None:
        return 0
    return int(sum(count for at, count in json.loads(starts_text or "[]") if at > now - period))


def window_text(period: float) -> str:
    """A rate's window as people read it: "1s", "10m", "1h"."""
    text = describe_period(period)
    return text if text[0].isdigit() else f"1{text}"


def wait_text(limit: Limit, key: str | None, figures: LimitKeyOverview | None) -> str:
    """Why a job waits for a limit (or a key of it), in words, from the key's
    figures now: "waiting for limit stripe: 100 starts in the last 1s",
    "waiting for limit account-sync (key acct-7): 1 of 1 running"."""
    what = f"waiting for limit {limit.name}" + (f" (key {shown_key(key)})" if key else "")
    if figures is None:
        return what
    if limit.concurrency is not None and figures.running >= limit.concurrency:
        return f"{what}: {figures.running} of {limit.concurrency} running"
    started = figures.started_in_window
    if limit.rate is not None and limit.period is not None and started >= limit.rate:
        starts = "1 start" if started == 1 else f"{started} starts"
        return f"{what}: {starts} in the last {window_text(limit.period)}"
    return f"{what}: it has room again, and starts at a worker's next claim"
