"""Retry policies: which failures are retried, and how long to wait first.

Pure functions of the attempt number (and a random source for jitter), so the
schedule of retries can be tested without running anything.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from due.durations import DurationLike, to_seconds
from due.errors import ConfigurationError

DEFAULT_MAX_ATTEMPTS = 20
MAX_ATTEMPTS = 1_000_000
"""More is a mistake (and PostgreSQL's integer column ends at 2**31 - 1)."""
DEFAULT_BACKOFF_SECONDS = 1.0
DEFAULT_MAX_DELAY_SECONDS = 3600.0
DEFAULT_JITTER = 0.25

BackoffLike = DurationLike | Callable[[int], DurationLike]


@dataclass(frozen=True)
class Retry:
    """How a task's failures are retried: give one to `@app.task(retry=...)`.

    The default retries any exception, 20 attempts in all, after 1 s, 2 s,
    4 s... capped at an hour, each delay give or take 25 %:

    >>> retry = Retry(max_attempts=5, backoff="10s", jitter=0)
    >>> [retry.delay(attempt) for attempt in (1, 2, 3)]
    [10.0, 20.0, 40.0]

    `backoff` and `max_delay` are refused beyond 100 years, like every
    duration. A delay computed later is clamped to `max_delay` instead, never
    refused: the doubling overtakes any cap after enough attempts, and a
    backoff function's result is only seen once an attempt has failed, too
    late to refuse anything without losing the job.

    Args:
        max_attempts: Total attempts, the first included (1: never retry); at
            most 1,000,000.
        backoff: The delay before the first retry, doubled for each later one
            (`backoff * 2 ** (attempt - 1)`), or a function of the attempt
            number that returns the delay.
        max_delay: The cap on any one delay.
        jitter: Each delay is multiplied by a random factor in `[1 - jitter,
            1 + jitter]` (then capped), so a burst of failures does not come
            back as a burst of retries; from 0 to 1.
        retry_on: Exception types that are retried (default: any Exception).
            A task's `SystemExit` or `KeyboardInterrupt` fails its attempt like
            an exception, and is retried only when named here.
        discard_on: Exception types that fail the job at once, attempts left
            or not; checked before `retry_on`.

    Raises:
        ConfigurationError: A value out of its range, a duration that cannot be
            read, or something other than exception types in `retry_on` or
            `discard_on`.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: BackoffLike = DEFAULT_BACKOFF_SECONDS
    max_delay: DurationLike = DEFAULT_MAX_DELAY_SECONDS
    jitter: float = DEFAULT_JITTER
    retry_on: tuple[type[BaseException], ...] = field(default=(Exception,))
    discard_on: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            attempts = 0
        if not 1 <= attempts <= MAX_ATTEMPTS:
            raise ConfigurationError(
                f"Retry(max_attempts={self.max_attempts!r}): must be a whole number "
                f"from 1 to {MAX_ATTEMPTS:,}"
            )
        if not callable(self.backoff):
            seconds = to_seconds(self.backoff, what="Retry(backoff=...)")
            object.__setattr__(self, "backoff", seconds)
        cap = to_seconds(self.max_delay, what="Retry(max_delay=...)")
        object.__setattr__(self, "max_delay", cap)
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"Retry(jitter={self.jitter!r}): must be between 0 and 1")
        object.__setattr__(self, "retry_on", _exception_types(self.retry_on, "retry_on"))
        object.__setattr__(self, "discard_on", _exception_types(self.discard_on, "discard_on"))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after a failed attempt, at most `max_delay`.

        Args:
            attempt: The number of the attempt that failed, from 1.
            rng: The random source of the jitter (default: the `random` module's).

        Returns:
            The delay, in seconds.

        Raises:
            ConfigurationError: A backoff function returned something that is
                not a duration.
        """
        cap = float(self.max_delay)  # type: ignore[arg-type]
        if callable(self.backoff):
            result = self.backoff(attempt)  # capped below, however long
            base = to_seconds(result, what="Retry(backoff=...) result", bounded=False)
        else:
            # 2.0 ** 1024 raises OverflowError; past 2 ** 1023 every delay is the cap.
            base = float(self.backoff) * 2.0 ** min(attempt - 1, 1023)  # type: ignore[arg-type]
        factor = 1.0
        if self.jitter:
            factor = (rng or random).uniform(1.0 - self.jitter, 1.0 + self.jitter)
        delay = base * factor  # infinite when base is huge; NaN for infinity times 0
        return max(0.0, delay) if delay < cap else cap

    def should_retry(self, error: BaseException, attempt: int, max_attempts: int) -> bool:
        """Whether a failure is retried.

        Args:
            error: What the attempt raised.
            attempt: The number of the attempt that failed, from 1.
            max_attempts: How many attempts the job may have in all.

        Returns:
            True when the error is retried and an attempt is left.
        """
        if isinstance(error, self.discard_on):
            return False
        return isinstance(error, self.retry_on) and attempt < max_attempts


def _exception_types(
    value: type[BaseException] | tuple[type[BaseException], ...], name: str
) -> tuple[type[BaseException], ...]:
    types = value if isinstance(value, tuple) else (value,)
    for item in types:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigurationError(f"Retry({name}=...) takes exception classes, got {item!r}")
    return types


NO_RETRY = Retry(max_attempts=1)


@dataclass(frozen=True, slots=True)
class LeaseLossVerdict:
    """What becomes of a job whose lease expired, and why."""

    gives_up: bool
    reason: str


def judge_lost_lease(
    *,
    attempt: int,
    max_attempts: int,
    lost_leases: int,
    worker: str | None,
    max_lost_leases: int,
    attempt_status: str = "started",
) -> LeaseLossVerdict:
    """What happens to a job whose lease expired: retried at once, or failed.

    `lost_leases` counts the consecutive attempts that already ended this way.
    A job whose worker keeps dying while running it (out of memory, a
    segfault) is failed after `max_lost_leases`, instead of killing workers
    forever; otherwise it is failed only when it has no attempts left.

    Only a start that ran is an attempt (`attempt_status`): a job its worker
    never said it started ('claimed': the claim's reply was lost, or the
    worker stopped before the handler began, or within a quarter second of it,
    or was cut off from the database first) goes back without spending one,
    still bounded by `max_lost_leases` should it be a job that kills its
    worker at once. A last attempt's start is recorded before its handler
    begins, so a last attempt that ran is never given back this way. One
    handed back at shutdown while its handler thread still ran
    ('handed_back') goes back without either.
    """
    holder = worker or "unknown"
    if attempt_status == "handed_back":
        return LeaseLossVerdict(
            False,
            f"handed back by worker {holder} at shutdown while its handler thread still ran; "
            "due again once its lease expired (attempt not counted)",
        )
    in_a_row = lost_leases + 1
    if in_a_row >= max_lost_leases:
        return LeaseLossVerdict(
            True,
            f"lost its lease {in_a_row} times in a row (last held by worker {holder}); "
            "failed instead of crashing more workers",
        )
    if attempt_status == "claimed":
        return LeaseLossVerdict(
            False,
            f"claimed by worker {holder}, which never said its handler began (the claim's "
            "reply was lost, or the worker stopped or was cut off before it could say so); "
            "retrying at once (attempt not counted)",
        )
    if attempt >= max_attempts:
        return LeaseLossVerdict(
            True, f"lease expired on the last attempt ({attempt}/{max_attempts}, worker {holder})"
        )
    return LeaseLossVerdict(
        False, f"lease expired (worker {holder} stopped renewing it); retrying at once"
    )
