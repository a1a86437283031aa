"""Secrets out of what due shows: every URL in a message, repr, log line, page
or JSON document goes through `redact_url` first (invariant 16).

A password may sit in a URL's userinfo (`postgresql://app:secret@db/app`,
`redis://:secret@cache`), in its query (`?password=secret`,
`?sslpassword=secret`), in a URL nested in the query (`due_listen_url=`,
percent-encoded or not), or in a libpq key=value string (`host=db
password='a secret'`). Each is replaced by `***`; the rest stays, so the
message still says which database it means.

Written with the standard library only (the core must not import psycopg),
and for text that may not parse as a URL at all (a URL refused for its
scheme, say): when in doubt, more is hidden (a URL whose query holds an "@"
loses its host to the `***` too).
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

HIDDEN = "***"
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})

# scheme://user:secret@host... The secret runs to the "@" that the host follows
# (a host, a port, several hosts, an [IPv6] address, then "/", "?", "#" or the
# end), so a raw "@" or "/" in the secret hides the whole of it.
_USERINFO = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*):(?P<secret>\S*?)"
    r"(?=@[^@/?#\s]*(?:[/?#\s]|$))"
)
# name=value in a URL's query: the value ends at "&", "#" or a space.
_QUERY_PARAMETER = re.compile(r"(?P<head>[?&;](?P<name>[^=&#\s]+)=)(?P<value>[^&#\s]*)")
# password=value in a libpq key=value string: the value is quoted, or runs to a space.
_KEYWORD = re.compile(
    r"(?P<head>(?:^|(?<=\s))(?:ssl)?password\s*=\s*)(?P<value>'(?:\\.|[^'\\])*'?|\S*)",
    re.IGNORECASE,
)


def redact_url(text: str) -> str:
    """`text` (a URL, a libpq conninfo string, or a message holding them)
    with every password replaced by `***`."""
    text = _KEYWORD.sub(lambda m: m["head"] + HIDDEN, text)
    text = _QUERY_PARAMETER.sub(_query_parameter, text)
    return _USERINFO.sub(lambda m: f"{m['head']}:{HIDDEN}", text)


def _query_parameter(match: re.Match[str]) -> str:
    if unquote(match["name"]).lower() in SECRET_PARAMETERS:
        return match["head"] + HIDDEN
    value = unquote(match["value"])
    if "://" not in value:
        return match[0]
    hidden = redact_url(value)  # a URL in the query (due_listen_url=...)
    return match[0] if hidden == value else match["head"] + quote(hidden, safe=":/@*")
