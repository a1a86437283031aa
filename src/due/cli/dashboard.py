"""`due dashboard`: the web dashboard, served by uvicorn (the extra `due[web]`)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any

import click

from due.cli.common import Settings
from due.cli.main import main
from due.errors import DueError
from due.hosts import LOOPBACK_NAMES


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen on this address.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Listen on this port (0: any free one, said when listening).",
)
@click.option(
    "--token",
    envvar="DUE_DASHBOARD_TOKEN",
    help="A bearer token every request must carry (or $DUE_DASHBOARD_TOKEN); "
    "needed to listen beyond this host, unless --basic-auth is given.",
)
@click.option(
    "--basic-auth",
    envvar="DUE_DASHBOARD_BASIC_AUTH",
    metavar="USER:PASSWORD",
    help="HTTP basic auth instead of (or beside) a token (or $DUE_DASHBOARD_BASIC_AUTH).",
)
@click.option(
    "--trusted-proxies",
    envvar="DUE_DASHBOARD_TRUSTED_PROXIES",
    metavar="ADDRESSES",
    help="The addresses (or networks, comma-separated) of the proxies in front of it, "
    "or $DUE_DASHBOARD_TRUSTED_PROXIES: a request from one of them is from the client "
    "its X-Forwarded-For names (written in the history with what it did) and over the "
    "scheme its X-Forwarded-Proto says. Without it, no forwarded header is believed.",
)
@click.pass_obj
def dashboard(
    settings: Settings,
    host: str,
    port: int,
    token: str | None,
    basic_auth: str | None,
    trusted_proxies: str | None,
) -> None:
    """Serve the web dashboard: queues, jobs with live progress, schedules, workers,
    alerts, and safe actions. Listens on 127.0.0.1 unless told otherwise, and
    refuses any other address without a credential."""
    try:
        import uvicorn

        from due.web.app import create_dashboard
        from due.web.security import Credential, proxies, require_credential_off_loopback
    except ImportError as error:
        click.echo(
            f"error: the dashboard needs the extra due[web] ({error.name} is missing): "
            "pip install 'due[web]'",
            err=True,
        )
        sys.exit(1)
    try:
        trusted = proxies(trusted_proxies)
        credential = Credential.build(token, basic_auth)
        require_credential_off_loopback(host, credential)
        app = settings.app
        app.store.check_schema()
        # Without a credential it serves loopback only: answer only to loopback
        # names too (a re-pointed DNS name must not make it another site's).
        hosts = None if credential is not None else LOOPBACK_NAMES | {host.lower()}
        asgi = create_dashboard(app, credential=credential, allowed_hosts=hosts)
    except DueError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    shown = f"[{host}]" if ":" in host else host
    # uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise:
    # any process of this host could then write who acted into the history.
    config = uvicorn.Config(
        asgi,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or None,
    )
    server = _server_class(shown)(config)
    try:
        server.run()
    except SystemExit:
        # uvicorn exits from inside its loop when the bind fails.
        if server.started:
            raise
    if not server.started:
        click.echo(f"error: could not listen on {host}:{port}", err=True)
        sys.exit(1)


def _server_class(shown_host: str) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, but SIGTERM and SIGINT end it with exit code 0 (uvicorn
        raises the signal again once stopped; a supervisor would see a crash), and
        it says where it listens only once its socket is bound (whoever waits for
        that line may connect at once), with the port bound (--port 0: any)."""

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                port = self.servers[0].sockets[0].getsockname()[1]
                where = f"http://{shown_host}:{port}/"
                click.echo(f"dashboard on {where} (Ctrl-C stops it)", err=True)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, self.handle_exit)
            yield

    return Server
