"""The supervisor's stop reaches every child, even one it was restarting when
the signal came (a child that heard nothing kept `due worker --processes`
waiting for it until it found itself orphaned, 30 s later)."""

from __future__ import annotations

import signal
import sys

from due.worker.supervisor import Supervisor
from tests.helpers.waiting import holds_for

CHILD = [sys.executable, "-c", "import time; time.sleep(60)"]  # runs until told


def test_a_child_started_as_the_stop_came_is_told_too() -> None:
    supervisor = Supervisor(CHILD, processes=2)
    supervisor.children = [supervisor._spawn(slot, 0.0) for slot in range(2)]
    dead = supervisor.children[1]
    dead.process.kill()
    dead.process.wait(10)
    # The restart is under way: its child has started but is not in the list
    # yet when the signal handler runs, so the handler cannot tell it.
    restarted = supervisor._spawn(1, 0.0)
    try:
        supervisor._on_signal(signal.SIGTERM, None)
        supervisor.children[1] = restarted
        assert supervisor.children[0].process.wait(10) == -signal.SIGTERM
        holds_for(lambda: restarted.process.poll() is None, 0.3, what="the late child runs on")
        supervisor._tell_the_late()
        assert restarted.process.wait(10) == -signal.SIGTERM  # told: it stops as asked
    finally:
        restarted.process.kill()
