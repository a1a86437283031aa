from datetime import timedelta

import pytest

from due.durations import to_seconds
from due.errors import ConfigurationError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30),
        ("15m", 900),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("90", 90),
        ("1.5h", 5400),
        (" 10S ", 10),
        (12, 12.0),
        (0.25, 0.25),
        (timedelta(minutes=2), 120),
    ],
)
def test_readable_durations(text: object, seconds: float) -> None:
    assert to_seconds(text) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "soon", "10 minutes", "1h 30m", "h", "5x", True, None, [1]])
def test_unreadable_durations_name_the_setting(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="lease"):
        to_seconds(bad, what="lease")  # type: ignore[arg-type]
