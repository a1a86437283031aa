import random

import pytest

from due.retry import Retry, judge_lost_lease


def test_exponential_backoff_without_jitter_is_capped() -> None:
    policy = Retry(backoff="2s", max_delay="30s", jitter=0)
    assert [policy.delay(n) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]


def test_jitter_stays_within_its_band_and_varies() -> None:
    policy = Retry(backoff=100, jitter=0.25, max_delay="1d")
    rng = random.Random(7)
    delays = [policy.delay(1, rng) for _ in range(200)]
    assert all(75 <= d <= 125 for d in delays)
    assert len({round(d, 3) for d in delays}) > 150


def test_a_backoff_function_decides_the_delay() -> None:
    policy = Retry(backoff=lambda attempt: f"{attempt * 10}s", jitter=0)
    assert policy.delay(3) == 30


def test_which_failures_are_retried() -> None:
    policy = Retry(
        max_attempts=3, retry_on=(ConnectionError, TimeoutError), discard_on=BrokenPipeError
    )
    assert policy.should_retry(ConnectionError(), attempt=1, max_attempts=3)
    assert not policy.should_retry(ConnectionError(), attempt=3, max_attempts=3)
    assert not policy.should_retry(ValueError(), attempt=1, max_attempts=3)
    assert not policy.should_retry(
        BrokenPipeError(), attempt=1, max_attempts=3
    )  # a ConnectionError too


@pytest.mark.parametrize(
    ("attempt", "lost", "gives_up", "words"),
    [(1, 0, False, "retrying"), (5, 0, True, "last attempt"), (2, 2, True, "3 times in a row")],
)
def test_lost_lease_verdicts(attempt: int, lost: int, gives_up: bool, words: str) -> None:
    verdict = judge_lost_lease(
        attempt=attempt, max_attempts=5, lost_leases=lost, worker="h:1", max_lost_leases=3
    )
    assert verdict.gives_up is gives_up and words in verdict.reason and "h:1" in verdict.reason


def test_invalid_policies() -> None:
    for bad in (
        dict(max_attempts=0),
        dict(backoff=-1),
        dict(jitter=2),
        dict(retry_on=[ValueError]),
    ):
        with pytest.raises(ValueError):
            Retry(**bad)  # type: ignore[arg-type]
