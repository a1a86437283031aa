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
scheme, or a password libpq cannot read: a space, a raw "@" or "/"): when in
doubt, more is hidden (a URL whose query holds an "@" loses its host to the
`***` too). What libpq says of a URL it cannot read is not shown at all:
store/postgres/conninfo.py.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

HIDDEN = "***"
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})

# scheme://user:secret@host... The secret runs to the last "@" of its line that
# a host follows (a host, a port, several hosts, an [IPv6] address, then "/",
# "?", "#", a space or the end), so a raw "@", "/" or space in the secret
# hides the whole of it (and in a message, whatever stands between it and
# a later address on the line).
_USERINFO = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*):(?P<secret>[^\n]*)"
    r"(?=@[^@/?#\s]*(?:[/?#\s]|$))"
)
# name=value in a URL's query: the value ends at "&", "#" or the end of its
# line (a space in a password is no end of it: libpq refuses the URL, and
# its message must not show the rest).
_QUERY_PARAMETER = re.compile(r"(?P<head>[?&;](?P<name>[^=&#\s]+)=)(?P<value>[^&#\n]*)")
# password=value in a libpq key=value string: the value is quoted, or runs to
# the next keyword= (or the end of its line): an unquoted space is no end of
# it, for the same reason.
_KEYWORD = re.compile(
    r"(?P<head>(?:^|(?<=\s))(?:ssl)?password\s*=\s*)"
    r"(?P<value>'(?:\\.|[^'\\])*'?|\S*(?:[ \t]+(?![ \t]*\w+[ \t]*=)\S+)*)",
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
