"""The dashboard inside a Django site, for staff users only.

`path("jobs/", include("due.contrib.django.urls"))` serves due's dashboard (a
Starlette app) under the site's own URL: Django's session login decides who
may look (an anonymous visitor is sent to LOGIN_URL, or to the admin's login
when the settings do not set it; a signed-in user who is not staff is
refused), Django's CSRF protection guards its actions, and each action is
recorded as done by the signed-in user.
"""

from __future__ import annotations

import threading
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.http.request import RawPostDataException
from django.middleware.csrf import get_token
from django.urls import NoReverseMatch, reverse
from django.views.decorators.csrf import csrf_protect

from due.app import App
from due.web.security import HOST_CSRF

DJANGO_CSRF_FIELD = "csrfmiddlewaretoken"
_dashboards: dict[int, tuple[App, Any]] = {}
_lock = threading.Lock()


@csrf_protect  # type: ignore[untyped-decorator]
def dashboard(request: HttpRequest, subpath: str = "") -> HttpResponse:
    user = request.user
    if not user.is_authenticated:
        return _to_login(request)
    if not (user.is_active and user.is_staff):
        raise PermissionDenied("the jobs dashboard is for staff users")
    return async_to_sync(_call)(_dashboard_of(_app()), request, subpath)


NO_LOGIN_PAGE = (
    "The jobs dashboard is for signed-in staff users, and this site has no login "
    "page to send you to. Set LOGIN_URL in the settings to the URL (or the URL "
    'name) of your login page, or include the admin\'s URLs (path("admin/", '
    "admin.site.urls)), whose login page is then used.\n"
)


def _to_login(request: HttpRequest) -> HttpResponse:
    """To the site's login page: LOGIN_URL when the settings set it (Django's
    default, /accounts/login/, is a page a new project does not have), else
    the admin's; with neither, a page that says what to set."""
    if settings.is_overridden("LOGIN_URL"):
        return redirect_to_login(request.get_full_path())
    try:
        admin_login = reverse("admin:login")
    except NoReverseMatch:
        return HttpResponseForbidden(NO_LOGIN_PAGE, content_type="text/plain; charset=utf-8")
    return redirect_to_login(request.get_full_path(), admin_login)


def _app() -> App:
    from due.contrib.django import configuration, due_app

    return due_app(configuration.backend_alias())


def _dashboard_of(app: App) -> Any:
    """The dashboard of `app`, made once per App."""
    with _lock:
        made = _dashboards.get(id(app))
        if made is None or made[0] is not app:
            from due.web.app import create_dashboard

            made = _dashboards[id(app)] = (app, create_dashboard(app))
        return made[1]


def _query_bytes(request: HttpRequest) -> bytes:
    """The query string as it came: WSGI hands it over decoded as latin-1 (PEP
    3333), Django's ASGI handler as UTF-8."""
    query = str(request.META.get("QUERY_STRING", ""))
    return query.encode("utf-8" if isinstance(request, ASGIRequest) else "latin-1", "replace")


def _body(request: HttpRequest) -> bytes:
    """The request's body; once Django's CSRF check has read the form from the
    stream, the form encoded again (the dashboard's forms are urlencoded)."""
    try:
        body: bytes = request.body
    except RawPostDataException:
        body = request.POST.urlencode().encode("utf-8")
    return body


async def _call(asgi: Any, request: HttpRequest, subpath: str) -> HttpResponse:
    """One request through the dashboard's ASGI app, its answer as Django's."""
    full = request.path
    prefix = full[: len(full) - len(subpath)].rstrip("/") if subpath else full.rstrip("/")
    path = f"{prefix}/{subpath}"
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in request.headers.items()
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": path,
        "raw_path": path.encode("utf-8"),
        "root_path": prefix,
        "query_string": _query_bytes(request),
        "headers": headers,
        "client": (request.META.get("REMOTE_ADDR") or "", 0),
        "server": (request.META.get("SERVER_NAME", ""), int(request.META.get("SERVER_PORT") or 0)),
        "due.who": f"{request.user.get_username()} (Django user)",
        HOST_CSRF: (DJANGO_CSRF_FIELD, get_token(request)),
    }
    body = _body(request)
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    status = 500
    answer_headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, answer_headers
        if message["type"] == "http.response.start":
            status = message["status"]
            answer_headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await asgi(scope, receive, send)
    response = HttpResponse(b"".join(chunks), status=status)
    for name, value in answer_headers:
        key = name.decode("latin-1")
        if key.lower() in ("content-length", "set-cookie"):
            continue  # Django counts the body; the dashboard sets no cookie of its own here
        response[key] = value.decode("latin-1")
    return response
