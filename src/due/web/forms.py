"""What a request to the dashboard carries: its form, who sent it, a job id
typed, and where it may be sent back to."""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.requests import Request

MAX_FORM_BYTES = 64 * 1024


def typed_job_id(text: str | None) -> int | None:
    """A job id typed or linked (digits, in range), else None."""
    if text and text.isascii() and text.isdecimal() and len(text) <= 18:
        return int(text)
    return None


def who(request: Request) -> str:
    person = request.scope.get("due.who") or "anyone on this host"
    client = request.client.host if request.client else "unknown address"
    return f"{person} via the dashboard from {client}"


def local_path(target: str | None, request: Request, default: str = "/") -> str:
    """A redirect target inside the dashboard (never another site)."""
    base = str(request.scope.get("root_path", ""))
    if target and target.startswith("/") and not target.startswith("//"):
        return target if target.startswith(base) else base + target
    return base + default


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form (the dashboard's forms have no files, and are small:
    a bigger body is not read past MAX_FORM_BYTES)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    text = body.decode("utf-8", errors="replace")
    return {name: values[-1] for name, values in parse_qs(text).items()}
