"""The numbers of a limit as people write them, and the decision of a claim."""

from __future__ import annotations

import pytest

from due.core.limits import (
    KeyState,
    build,
    decide,
    describe_period,
    parse_rate,
    start_tolerance,
)
from due.errors import ConfigurationError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100/s", (100, 1.0)),
        ("10/m", (10, 60.0)),
        ("1000/h", (1000, 3600.0)),
        ("5/10m", (5, 600.0)),
        (" 7 / 2s ", (7, 2.0)),
    ],
)
def test_rates_are_written_n_per_period(text: str, expected: tuple[int, float]) -> None:
    assert parse_rate(text, limit="x") == expected
    count, period = expected
    assert build("x", rate=text).rate_text == f"{count}/{describe_period(period)}"


@pytest.mark.parametrize("text", ["ten/s", "0/s", "5/0s", "5/25h", "5/d", 5, "", "1.5/s"])
def test_a_bad_rate_is_refused_naming_the_limit(text: object) -> None:
    with pytest.raises(ConfigurationError, match="limit 'x': rate="):
        parse_rate(text, limit="x")


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_a_bad_concurrency_is_refused(value: object) -> None:
    with pytest.raises(ConfigurationError, match="concurrency="):
        build("x", concurrency=value)


def state(**numbers: object) -> KeyState:
    row = {
        "name": "l",
        "key": "",
        "now_s": 100.0,
        "concurrency": None,
        "rate": None,
        "period": None,
        "running": 0,
        "starts": "[]",
        "block_version": 0,
    }
    row.update(numbers)
    return KeyState.from_row(row)


def test_the_rate_window_slides_and_says_when_it_opens() -> None:
    # 3 per 10 s, and the 0.5 s a handler may take to begin: a window of 10.5 s.
    # Starts at 91 (1), 95 (2); 89 has left the window.
    key = state(rate=3, period=10.0, starts="[[89, 5], [95, 2], [91, 1]]")
    assert key.started_in_window == 3
    assert key.why_not() == "rate" and key.room() == 0
    assert key.opens_at() == 101.5  # the start at 91 leaves the window
    key = state(rate=3, period=10.0, starts="[[95, 2]]")
    decision = decide([(1, [("l", "")]), (2, [("l", "")])], {("l", ""): key})
    assert decision.granted == [1]
    assert decision.waiting == [(2, "l", "")]
    assert key.log() == [[95, 2], [100.0, 1]]
    assert key.opens_at() == 105.5
    assert key.next_look() == 105.5  # a job waits for the rate: looked at when it opens
    assert decision.start_by == {1: 100.5}  # its handler begins by then, or not at all


def test_the_start_tolerance_is_a_share_of_the_period_up_to_a_second() -> None:
    assert start_tolerance(1.0) == pytest.approx(0.05)
    assert start_tolerance(10.0) == pytest.approx(0.5)
    assert start_tolerance(3600.0) == 1.0


def test_a_job_set_waiting_for_a_slot_is_looked_at_again_at_once() -> None:
    """(After the claim commits: an end committed since it counted finds nobody
    waiting yet, store/limit_claims.py.) A job that counts against no rate
    has no time its handler must begin by."""
    key = state(concurrency=1, running=1)
    decision = decide([(1, [("l", "")])], {("l", ""): key})
    assert decision.waiting == [(1, "l", "")]
    assert key.next_look() == 100.0
    assert decision.start_by == {}


def test_a_candidate_waits_for_the_first_key_without_room() -> None:
    whole = state(name="a", concurrency=2, running=1)
    per_key = state(name="b", key="k", concurrency=1, running=1)
    states = {("a", ""): whole, ("b", "k"): per_key}
    decision = decide([(1, [("a", ""), ("b", "k")]), (2, [("a", "")])], states)
    assert decision.granted == [2]
    assert decision.waiting == [(1, "b", "k")]
    assert (whole.granted, per_key.granted) == (1, 0)
