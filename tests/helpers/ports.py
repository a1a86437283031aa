"""A TCP port free on this machine now, for a server a test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port no process listens on at this instant (the system's pick): tests
    that run side by side (pytest -n) never share a fixed one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
