"""A TCP proxy a test can freeze: connections stay open and no byte passes, as a
worker sees a network partition or a hung proxy between it and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit


class FreezableProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.sent = 0
        """Reads passed from clients to the server: about one a statement (its round trip)."""

    def start(self) -> int:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self.port

    def freeze(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def thaw(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        current = asyncio.current_task()
        pumps = [task for task in asyncio.all_tasks() if task is not current]
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)

    def url_through(self, url: str) -> str:
        """`url` with its host and port replaced by this proxy's."""
        parts = urlsplit(url)
        netloc = f"{parts.username + '@' if parts.username else ''}127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    async def _start(self) -> None:
        self._flowing.set()
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _connected(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        try:
            server_in, server_out = await asyncio.open_connection(*self.target)
        except OSError:  # the database is down (restarting): the client sees it closed
            client_out.close()
            return
        await asyncio.gather(
            self._pump(client_in, server_out, counted=True), self._pump(server_in, client_out)
        )

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, counted: bool = False
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await source.read(65536):
                self.sent += counted
                await self._flowing.wait()  # frozen: hold every byte, close nothing
                sink.write(data)
                await sink.drain()
        with contextlib.suppress(ConnectionError, OSError):
            sink.close()


@contextlib.contextmanager
def freezable_proxy(host: str = "127.0.0.1", port: int = 5432) -> Iterator[FreezableProxy]:
    proxy = FreezableProxy(host, port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.thaw()
        proxy.stop()
