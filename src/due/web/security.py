"""Who may look and act, and what a browser may do with the pages.

A dashboard bound to the loopback interface may go without a credential (only
this host reaches it); bound anywhere else it needs one (`Credential`), and the
CLI refuses to start without. Credentials are compared in constant time.

A browser signs in with the token once (`/login`) and is given a session
cookie: a time it ends and an HMAC of that time keyed by the token, never
the token itself, so the cookie cannot be replayed as a bearer token, ends
after `SESSION_LIFETIME`, and ends for every browser when the token is
changed. It is sent only to the dashboard's own paths (its mount's), only
over https when the dashboard is served over https, and never to scripts.

Every action is a POST carrying a CSRF token: the double-submit pattern, a
random value in a SameSite=Strict cookie that the form must echo (or, inside
a framework that checks CSRF itself, that framework's token: `host_csrf`). Every
response denies framing, carries a strict Content-Security-Policy (scripts and
styles from this origin only, no inline ones) and, for pages with data, is
not cached.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote, urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from due.clock import SystemClock
from due.errors import ConfigurationError
from due.hosts import hostname, is_loopback

SESSION_COOKIE = "due_session"
SESSION_LIFETIME = timedelta(days=7)
"""How long a browser stays signed in with the token."""
CSRF_COOKIE = "due_csrf"
CSRF_FIELD = "csrf"
OPEN_PATHS = ("/static/", "/login")

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


@dataclass(frozen=True)
class Credential:
    """A bearer token, or a user and password for HTTP basic auth (or both)."""

    token: str | None = None
    user: str | None = None
    password: str | None = None

    @classmethod
    def build(cls, token: str | None = None, basic_auth: str | None = None) -> Credential | None:
        """From `--token` and `--basic-auth user:password`; None when neither is given."""
        if token is not None and not token.strip():
            raise ConfigurationError("the dashboard token is empty; give a long random value")
        user = password = None
        if basic_auth is not None:
            user, colon, password = basic_auth.partition(":")
            if not colon or not user or not password:
                raise ConfigurationError(
                    f"basic auth {basic_auth!r} is not 'user:password'; give both, "
                    "separated by a colon"
                )
        if token is None and user is None:
            return None
        return cls(token, user, password)

    def who(self, request: Request, now: datetime) -> str | None:
        """The name of whoever the request proves to be, or None."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is not None:
            if scheme.lower() == "bearer":
                if _same(value, self.token):
                    return "token holder"
            elif self._session_ok(request.cookies.get(SESSION_COOKIE), now):
                return "token holder"
        if self.user is not None and self.password is not None and scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value).decode().partition(":")
            except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
                return None
            # Both compared, always: the time taken tells nothing about which was wrong.
            user_ok = _same(user, self.user)
            if _same(password, self.password) and user_ok:
                return user
        return None

    def token_matches(self, offered: str) -> bool:
        return self.token is not None and _same(offered, self.token)

    def session(self, now: datetime) -> str:
        """A session cookie's value for a browser that gave the token at `now`."""
        ends = int(now.timestamp() + SESSION_LIFETIME.total_seconds())
        return f"{ends}.{self._signature(ends)}"

    def _session_ok(self, value: str | None, now: datetime) -> bool:
        ends, _, signature = (value or "").partition(".")
        if not ends.isascii() or not ends.isdigit() or len(ends) > 12:
            return False
        return _same(signature, self._signature(int(ends))) and int(ends) > now.timestamp()

    def _signature(self, ends: int) -> str:
        assert self.token is not None
        mac = hmac.new(self.token.encode(), f"due session until {ends}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def refusal(self, request: Request) -> Response:
        if self.user is not None:
            return PlainTextResponse(
                "this dashboard needs a user and password",
                status_code=401,
                headers={"www-authenticate": 'Basic realm="due", charset="UTF-8"'},
            )
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            root = request.scope.get("root_path", "")
            target = f"{root}/login?next={quote(request.url.path)}"
            return RedirectResponse(target, status_code=303)
        return PlainTextResponse("this dashboard needs its token", status_code=401)


def _same(offered: str, expected: str) -> bool:
    return hmac.compare_digest(offered.encode(), expected.encode())


def proxies(addresses: str | None) -> list[str]:
    """`--trusted-proxies`: addresses or networks, comma-separated ("*": any
    client, for a dashboard only its proxy can reach)."""
    given = [part.strip() for part in (addresses or "").split(",") if part.strip()]
    for address in given:
        try:
            if address != "*":
                ipaddress.ip_network(address)  # an address is a network of one
        except ValueError:
            raise ConfigurationError(
                f"--trusted-proxies: {address!r} is not an IP address or network "
                "(10.0.0.7, 10.0.0.0/8, ::1); give the proxies' addresses, comma-separated"
            ) from None
    return given


def require_credential_off_loopback(host: str, credential: Credential | None) -> None:
    """Refuse to serve job data to a network without a credential."""
    if credential is None and not is_loopback(host):
        raise ConfigurationError(
            f"the dashboard would listen on {host}, beyond this host, without a credential: "
            "give --token (or DUE_DASHBOARD_TOKEN) or --basic-auth user:password, "
            "or bind 127.0.0.1 and put your own authentication in front"
        )


def cookie_path(request: Request) -> str:
    """The path the dashboard's cookies are sent to: its own (where it is mounted)."""
    return str(request.scope.get("root_path") or "/")


def set_session_cookie(response: Response, request: Request, value: str) -> None:
    """The session cookie on `response`: for the dashboard's paths alone, over
    https only when served over https, never to scripts. Lax: a link to a page
    from elsewhere (an alert in a chat) opens it signed in; the actions still
    need their CSRF token."""
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        path=cookie_path(request),
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="lax",
    )


def csrf_token(request: Request) -> str:
    """This browser's CSRF token (made on its first page; set by `Guard`)."""
    token = request.cookies.get(CSRF_COOKIE) or request.scope.get("due.csrf")
    if token is None:
        token = secrets.token_urlsafe(32)
        request.scope["due.csrf"] = token
    return str(token)


HOST_CSRF = "due.host_csrf"
"""Scope key set by a framework the dashboard is embedded in (Django) that
checks CSRF itself: its form field and this request's token, which the forms
carry instead of the dashboard's own."""


def host_csrf(request: Request) -> tuple[str, str] | None:
    """(field, token) of the host framework's CSRF protection, when it has one."""
    found = request.scope.get(HOST_CSRF)
    return (str(found[0]), str(found[1])) if found else None


def csrf_ok(request: Request, offered: str | None) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE)
    return bool(cookie and offered) and _same(str(offered), str(cookie))


class Guard:
    """ASGI middleware: the credential check, and the headers every response carries."""

    def __init__(
        self,
        app: ASGIApp,
        credential: Credential | None,
        allowed_hosts: frozenset[str] | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.app = app
        self.credential = credential
        self.allowed_hosts = allowed_hosts
        self.now = now or SystemClock().wall

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = request.url.path.removeprefix(scope.get("root_path", ""))
        refused = self._refused_origin(request)
        if refused is not None:
            await _with_headers(PlainTextResponse(refused, status_code=403), scope, receive, send)
            return
        if self.credential is not None and not path.startswith(OPEN_PATHS):
            who = self.credential.who(request, self.now())
            if who is None:
                await _with_headers(self.credential.refusal(request), scope, receive, send)
                return
            scope["due.who"] = who

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if not path.startswith("/static/"):
                    headers["cache-control"] = "no-store"
                token = scope.get("due.csrf")
                if token is not None and not request.cookies.get(CSRF_COOKIE):
                    where = f"Path={cookie_path(request)}"
                    secure = "; Secure" if request.url.scheme == "https" else ""
                    headers.append(
                        "set-cookie",
                        f"{CSRF_COOKIE}={token}; {where}; HttpOnly; SameSite=Strict{secure}",
                    )
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refused_origin(self, request: Request) -> str | None:
        """Why a request from elsewhere is refused, or None.

        A dashboard on loopback answers only to loopback names: a page whose own
        name was re-pointed at 127.0.0.1 (DNS rebinding) would otherwise read it
        as its own origin. And a POST from a page of another origin is refused,
        whatever its cookies say.
        """
        host = hostname(request.headers.get("host", ""))
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            return f"this dashboard does not answer to the host name {host!r}"
        if request.scope.get(HOST_CSRF):
            return None  # the host framework checked the origin (behind its proxies) with CSRF
        origin = request.headers.get("origin")
        own = request.headers.get("host", "")
        if request.method == "POST" and origin is not None and urlsplit(origin).netloc != own:
            return "a form from another site may not act on this dashboard"  # "null" too
        return None


async def _with_headers(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    response.headers["cache-control"] = "no-store"
    await response(scope, receive, send)
