"""`due metrics`' HTTP server: prometheus_client's exposition, served by the
standard library in threads, for the Host names it answers only (due.hosts).

prometheus_client's own `start_http_server` answers any Host header: a page
of another site re-pointed at 127.0.0.1 could read the figures as its own.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import Collector

from due.hosts import answered_names, answers, hostname


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per scrape on stderr


def serve(
    registry: Collector, host: str, port: int, allowed: Iterable[str] = ()
) -> tuple[WSGIServer, threading.Thread]:
    """Serve `registry` on host:port (0: any free port), answering the Host
    names `due.hosts.answered_names` gives; the server and its thread."""
    names = answered_names(host, frozenset(allowed))
    metrics = make_wsgi_app(registry)

    def guarded(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        asked = hostname(environ.get("HTTP_HOST", ""))
        if answers(asked, host, names):
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
        return [
            f"due metrics does not answer to the host name {asked!r}; if Prometheus "
            f"scrapes it by that name, start it with --allow-host {asked}\n".encode()
        ]

    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    server_class = type("Server", (_Server,), {"address_family": family})
    server: WSGIServer = make_server(
        str(address[0]), port, guarded, server_class, handler_class=_Quiet
    )
    thread = threading.Thread(target=server.serve_forever, name="due-metrics", daemon=True)
    thread.start()
    return server, thread
