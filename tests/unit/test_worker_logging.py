"""`due worker --log-level`: the least severe lines printed, whoever logs them."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from due.worker.main import configure_logging


@pytest.fixture
def restored_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_library_logger_with_its_own_level_prints_nothing_below_the_worker_s(
    restored_root: None, capsys: pytest.CaptureFixture[str]
) -> None:
    library = logging.getLogger("a_library")  # as Django's "django" logger: INFO
    library.setLevel(logging.INFO)
    configure_logging("text", "warning")
    library.info("an info line")
    library.warning("a warning line")
    logging.getLogger("due.worker").info("due's own info line")
    printed = capsys.readouterr().err
    assert "a warning line" in printed
    assert "an info line" not in printed
    assert "due's own info line" not in printed
