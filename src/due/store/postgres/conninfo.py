"""A database URL as libpq reads it, checked before anything connects.

libpq refuses a URL it cannot parse (a space, a bare `%`, a raw `@` or `/`
in the password) with a message that quotes the piece it stumbled on, or
the whole URL: often the password itself. The refusal is due's own, with
the URL through `redact_url` and libpq's quoted pieces hidden (invariant
16), and it comes when the store is made, not from a pool's thread later.
"""

from __future__ import annotations

import re

import psycopg

from due.errors import ConfigurationError
from due.redaction import HIDDEN, redact_url

_QUOTED = re.compile(r'"[^"]*"')


def check_readable(url: str, what: str = "database URL") -> None:
    """Raise ConfigurationError when libpq cannot read `url`."""
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        reason = _QUOTED.sub(f'"{HIDDEN}"', str(error)).strip()
        raise ConfigurationError(
            f"the {what} {redact_url(url)!r} cannot be read: {reason}; percent-encode "
            "the characters of its user name and password (a space as %20, % as %25, "
            "@ as %40, / as %2F), or quote the value of a key=value string ('a b')"
        ) from None
