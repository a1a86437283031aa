"""`due worker --health-port`: the probes Kubernetes (or any supervisor) asks.

    GET /livez   200 while the event loop answers and the heartbeat loop goes
                 round (a round that could not reach the database still counts:
                 an outage is no reason to restart the process); 503 once it has
                 not for `stale_after` seconds (3 leases, at least 10 s).
    GET /readyz  200 while the worker claims jobs and its last registration
                 touch reached the database within one lease; 503 while it
                 starts, while the database is out of reach, and while it
                 drains at shutdown (or before a recycle).

The body is one line of text saying why. The server is asyncio's own, on the
worker's loop: that the loop answers at all is the first half of liveness.
Each connection gets one answer and is closed; a client that sends nothing
for REQUEST_SECONDS is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from due.clock import Clock
from due.errors import ConfigurationError

REQUEST_SECONDS = 5.0
MAX_HEADER_LINES = 100


class Beats(Protocol):
    """What the heartbeat loop last did, on the monotonic clock (heartbeat.py)."""

    @property
    def round_ended_at(self) -> float | None:
        """When a round last ended, whatever its outcome."""

    @property
    def reached_at(self) -> float | None:
        """When the database last answered the registration touch."""


@dataclass
class Probes:
    """The two answers, from what the worker's loops last did."""

    beats: Beats
    clock: Clock
    lease: float
    stale_after: float
    phase: str = "starting"
    """starting → running → draining (worker.py sets it)."""

    def livez(self) -> tuple[int, str]:
        beat_at = self.beats.round_ended_at
        if self.phase == "starting" or beat_at is None:
            return 200, "ok: starting"
        silent = self.clock.monotonic() - beat_at
        if silent > self.stale_after:
            return 503, f"no heartbeat round for {silent:.1f}s"
        return 200, "ok"

    def readyz(self) -> tuple[int, str]:
        if self.phase != "running":
            return 503, f"not claiming: {self.phase}"
        reached_at = self.beats.reached_at
        if reached_at is None:
            return 503, "the database has not answered yet"
        silent = self.clock.monotonic() - reached_at
        if silent > self.lease:
            return 503, f"the database has not answered for {silent:.1f}s"
        return 200, "ok"


class HealthServer:
    """Serves `probes` on `port` (0: any free port; `port` then says which)."""

    def __init__(self, probes: Probes, port: int, host: str = "0.0.0.0") -> None:
        self._routes: dict[str, Callable[[], tuple[int, str]]] = {
            "/livez": probes.livez,
            "/readyz": probes.readyz,
        }
        self.port = port
        self._host = host
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._answer, self._host, self.port)
        except OSError as error:
            raise ConfigurationError(
                f"--health-port {self.port}: cannot listen on {self._host}:{self.port} "
                f"({error.strerror or error}); choose a free port"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(_read_request(reader), REQUEST_SECONDS)
            writer.write(self._response(request))
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def _response(self, request: tuple[str, str]) -> bytes:
        method, path = request
        route = self._routes.get(path.split("?", 1)[0])
        if route is None:
            status, text = 404, "not found: GET /livez or /readyz"
        elif method not in ("GET", "HEAD"):
            status, text = 405, "method not allowed: GET"
        else:
            status, text = route()
        body = (text + "\n").encode()
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(
            status, "Service Unavailable"
        )
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        return head if method == "HEAD" else head + body


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """The method and path; the headers are read and ignored."""
    method, path, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
    for _ in range(MAX_HEADER_LINES):
        if (await reader.readline()).strip() == b"":
            break
    return method, path
