"""The worker's event loop: uvloop when installed, asyncio on request, a clear
error when uvloop is asked for and missing."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from due.errors import ConfigurationError
from due.worker.event_loop import loop_factory, loop_name
from due.worker.settings import WorkerSettings


def test_auto_and_uvloop_take_uvloop_when_it_is_installed() -> None:
    for choice in ("auto", "uvloop"):
        factory = loop_factory(choice)
        assert factory is not None
        loop = factory()
        try:
            assert isinstance(loop, uvloop.Loop) and loop_name(loop) == "uvloop"
        finally:
            loop.close()


def test_asyncio_takes_the_standard_loop() -> None:
    assert loop_factory("asyncio") is None
    with asyncio.Runner(loop_factory=loop_factory("asyncio")) as runner:
        assert runner.run(_loop_name()) == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert loop_factory("auto") is None
    with pytest.raises(ConfigurationError, match=r"pip install 'due\[uvloop\]'"):
        loop_factory("uvloop")


def test_an_unknown_loop_is_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="choose one of auto, asyncio, uvloop"):
        WorkerSettings.build({"default": 1}, event_loop="trio")
    assert WorkerSettings.build({"default": 1}).event_loop == "auto"


async def _loop_name() -> str:
    return loop_name(asyncio.get_running_loop())
