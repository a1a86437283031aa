from datetime import timedelta

import pytest

from due.durations import MAX_SECONDS, describe, to_seconds
from due.errors import ConfigurationError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30),
        ("90s", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("1.5h", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("90", 90),
        ("1.5", 1.5),
        (" 10S ", 10),
        ("10 minutes", 600),
        ("1 hour 30 minutes", 5400),
        ("2 days 3h", 183600),
        ("250 msec", 0.25),
        ("0s", 0),
        (12, 12.0),
        (0.25, 0.25),
        (timedelta(minutes=2), 120),
    ],
)
def test_readable_durations(text: object, seconds: float) -> None:
    assert to_seconds(text) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad", ["", "soon", "1h30", "h", "5x", "5mx", "1h,30m", "--5s", True, None, [1], "nan"]
)
def test_unreadable_durations_name_the_setting(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="lease"):
        to_seconds(bad, what="lease")  # type: ignore[arg-type]


@pytest.mark.parametrize("negative", [-5, -5.0, "-5", "-5s", " -5 s", timedelta(seconds=-5)])
def test_a_negative_duration_gets_one_message_whatever_its_type(negative: object) -> None:
    with pytest.raises(ConfigurationError) as refused:
        to_seconds(negative, what="delay")  # type: ignore[arg-type]
    assert str(refused.value) == "delay cannot be negative (got -5s); give zero or more"


@pytest.mark.parametrize("infinite", [float("inf"), float("nan"), "inf"])
def test_an_infinite_duration_is_refused(infinite: object) -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        to_seconds(infinite, what="timeout")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "overlong", [MAX_SECONDS + 1, 1e13, "36601d", timedelta(days=36_601), timedelta.max]
)
def test_a_duration_past_a_century_is_refused_naming_the_setting_and_the_maximum(
    overlong: object,
) -> None:
    assert to_seconds(MAX_SECONDS) == to_seconds("36600d") == MAX_SECONDS
    with pytest.raises(ConfigurationError, match=r"^lease of .* is more than 100 years, the long"):
        to_seconds(overlong, what="lease")  # type: ignore[arg-type]
    assert to_seconds(overlong, bounded=False) > MAX_SECONDS  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"), [(5400, "1h30m"), (90, "1m30s"), (0.5, "0.5s"), (0, "0s"), (-5, "-5s")]
)
def test_describe(seconds: float, text: str) -> None:
    assert describe(seconds) == text
