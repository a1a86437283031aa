"""A TCP proxy a test can freeze: connections stay open and no byte passes, as a
worker sees a network partition or a hung proxy between it and PostgreSQL.

It can also lose the reply of a claim: armed (`cut_next_claim`), it reads the
PostgreSQL protocol on every connection, and when a claim statement has run
and claimed a job (a row in its reply, then the server's ReadyForQuery:
committed, as a claim runs on its own) it closes that connection without
passing the reply on, as a connection that breaks after the server committed.
Or it holds that reply back a while (`hold_next_claim`): a slow network.

And it can act at one point of a statement (`after_statement`): when the reply
to a statement whose text holds given markers has come whole, before it is
passed on (stop the client's process there, say, in the middle of its
transaction)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

CLAIM_MARKER = b"attempt_status = 'claimed'"
"""A text only the claim statement has (both its parse and its simple query)."""
NEGOTIATIONS = (80877103, 80877104)
"""SSLRequest and GSSENCRequest: the startup message proper comes after them."""


@dataclass
class _Watch:
    """What the proxy reads of one connection's protocol, to cut a claim's reply."""

    client: bytearray = field(default_factory=bytearray)
    server: bytearray = field(default_factory=bytearray)
    started: bool = False
    """The client's startup message (which has no type byte) has passed."""
    claim_names: set[bytes] = field(default_factory=set)
    """Prepared statements on this connection that are claims."""
    claim_sent: bool = False
    """A claim is running: cut at the server's next ReadyForQuery if it claimed."""
    claimed: bool = False
    replied: bool = False
    kinds: list[bytes] = field(default_factory=list)
    """The type of each message the client sent."""
    hooked_names: set[bytes] = field(default_factory=set)
    """Prepared statements on this connection that `after_statement` waits for."""
    hook_sent: bool = False
    """That statement is running: act at the server's next ReadyForQuery."""
    hold_sent: bool = False
    """A claim is running while `hold_next_claim` is armed: its own reply (up to
    its ReadyForQuery) is held if it claimed a job."""
    hold_rows: bool = False


class FreezableProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._cut_claim = threading.Event()
        self.claims_cut = 0
        self._hold_seconds = 0.0
        self.claims_held = 0
        self._hook: tuple[tuple[bytes, ...], Callable[[], None]] | None = None
        self.sent = 0
        """Reads passed from clients to the server: about one a statement (its round trip)."""
        self.client_messages: list[list[bytes]] = []
        """The type of each message each connection's client sent, in order."""

    def start(self) -> int:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self.port

    def cut_next_claim(self) -> None:
        """Lose the reply of the next claim that claims a job through this proxy
        (once)."""
        self._cut_claim.set()

    def hold_next_claim(self, seconds: float) -> None:
        """Hold back the reply of the next claim statement that claims a job
        through this proxy for `seconds`, then pass it on (once): the claim's
        worker hears of its jobs that much later (in a transaction, it commits
        that much later)."""
        self._hold_seconds = seconds

    def after_statement(self, markers: tuple[bytes, ...], action: Callable[[], None]) -> None:
        """Call `action` (on the proxy's thread) once, when the reply to the next
        statement whose text holds every one of `markers` has come whole from
        the server, before it is passed on."""
        self._hook = (markers, action)

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
        watch = _Watch()
        self.client_messages.append(watch.kinds)
        ends = (client_out, server_out)
        await asyncio.gather(
            self._pump(client_in, server_out, lambda data: self._from_client(watch, data), ends),
            self._pump(server_in, client_out, lambda data: self._from_server(watch, data), ends),
        )

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        cut: Callable[[bytes], bool | float],
        ends: tuple[asyncio.StreamWriter, ...],
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await source.read(65536):
                await self._flowing.wait()  # frozen: hold every byte, close nothing
                verdict = cut(data)
                if verdict is True:  # a claim's reply: lost with the connection
                    for end in ends:
                        end.transport.abort()
                    return
                if verdict:  # a claim's reply: held back that many seconds
                    await asyncio.sleep(verdict)
                sink.write(data)
                await sink.drain()
        with contextlib.suppress(ConnectionError, OSError):
            sink.close()

    def _from_client(self, watch: _Watch, data: bytes) -> bool:
        self.sent += 1
        watch.client += data
        while not watch.started:  # untyped: SSL or GSS negotiation, then the startup
            if len(watch.client) < 8:
                return False
            length, code = struct.unpack("!ii", watch.client[:8])
            if len(watch.client) < length:
                return False
            del watch.client[:length]
            watch.started = code not in NEGOTIATIONS
        armed = self._cut_claim.is_set()
        holding = self._hold_seconds > 0
        hook = self._hook
        for kind, body in _messages(watch.client):
            watch.kinds.append(kind)
            if kind == b"P":  # Parse: name, query
                name, _, rest = body.partition(b"\0")
                # The unnamed statement is parsed anew for each statement that
                # uses it: it is a claim only while the last one parsed was.
                watch.claim_names.discard(b"")
                watch.hooked_names.discard(b"")
                if CLAIM_MARKER in rest:
                    watch.claim_names.add(name)
                    watch.claim_sent |= name == b"" and armed
                    watch.hold_sent |= name == b"" and holding
                if hook is not None and all(marker in rest for marker in hook[0]):
                    watch.hooked_names.add(name)
                    watch.hook_sent |= name == b""
            elif kind == b"B":  # Bind: portal, statement
                statement = body.split(b"\0", 2)[1]
                watch.claim_sent |= statement in watch.claim_names and armed
                watch.hold_sent |= statement in watch.claim_names and holding
                watch.hook_sent |= statement in watch.hooked_names and hook is not None
            elif kind == b"Q":  # a simple query
                watch.claim_sent |= CLAIM_MARKER in body and armed
                watch.hold_sent |= CLAIM_MARKER in body and holding
                watch.hook_sent |= hook is not None and all(m in body for m in hook[0])
        return False

    def _from_server(self, watch: _Watch, data: bytes) -> bool | float:
        if not (watch.claim_sent or watch.hook_sent or watch.hold_sent):
            return False
        watch.server += data
        held = 0.0
        for kind, body in _messages(watch.server):
            if kind == b"Z" and watch.hook_sent:  # the statement's reply is whole
                watch.hook_sent = False
                self._act()
            if watch.hold_sent:  # the claim's own reply: rows, then its ReadyForQuery
                watch.hold_rows |= kind == b"D"
                if kind == b"Z":
                    watch.hold_sent = False
                    if watch.hold_rows and self._hold_seconds:
                        held, self._hold_seconds = self._hold_seconds, 0.0
                        self.claims_held += 1
                    watch.hold_rows = False
            if watch.claim_sent:
                watch.claimed |= kind == b"D"  # a row: a job was claimed
                # ReadyForQuery, idle: the claim's implicit transaction has committed.
                watch.replied |= kind == b"Z" and body == b"I"
        if held:
            return held
        if not watch.claim_sent or not watch.replied:
            return False
        claimed, watch.claimed, watch.replied, watch.claim_sent = watch.claimed, False, False, False
        watch.server.clear()
        if not claimed or not self._cut_claim.is_set():
            return False  # it claimed nothing, or another connection's claim was cut first
        self._cut_claim.clear()
        self.claims_cut += 1
        return True

    def _act(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            hook[1]()


def _messages(buffer: bytearray) -> Iterator[tuple[bytes, bytes]]:
    """The whole protocol messages at the head of `buffer` (type, body), taken
    out of it; a message not yet whole stays for the next read."""
    while len(buffer) >= 5:
        (length,) = struct.unpack("!i", buffer[1:5])
        if len(buffer) < 1 + length:
            return
        kind, body = bytes(buffer[:1]), bytes(buffer[5 : 1 + length])
        del buffer[: 1 + length]
        yield kind, body


@contextlib.contextmanager
def freezable_proxy(host: str = "127.0.0.1", port: int = 5432) -> Iterator[FreezableProxy]:
    proxy = FreezableProxy(host, port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.thaw()
        proxy.stop()
