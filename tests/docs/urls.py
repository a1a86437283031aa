"""The databases a page names, and the ones it runs on.

A page shows the URLs its reader would use (`postgresql://localhost/myapp`,
`postgresql://app@pgbouncer:6432/app?due_pooler=transaction`); the harness
runs each on a PostgreSQL schema made for the page. A URL whose host is
`pgbouncer` reaches that schema through a real PgBouncer in transaction mode,
started for the page; any other URL reaches it directly. The URL's own `due_`
parameters are kept, and a URL given as `due_listen_url` is mapped the same way.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

POSTGRES_URL = re.compile(r"postgres(?:ql)?://[^\s'\"]+")
PGBOUNCER_HOST = "pgbouncer"


def hosts_named(text: str) -> set[str]:
    """What a page's URLs need: "postgres" for any, "pgbouncer" for the pooler's."""
    hosts = {urlsplit(url).hostname or "" for url in POSTGRES_URL.findall(text)}
    return ({"postgres"} if hosts else set()) | ({PGBOUNCER_HOST} & hosts)


@dataclass(frozen=True)
class Databases:
    direct: str | None
    """The page's schema, straight to PostgreSQL (None: the page runs without one)."""
    pgbouncer: str | None = None
    """The same schema through the page's PgBouncer."""

    def substituted(self, text: str, *, quote: bool = False) -> str:
        """`text` with every PostgreSQL URL it names replaced by the one it stands for
        (shell-quoted for a command line)."""

        def replaced(found: re.Match[str]) -> str:
            url = self.url_for(found.group(0))
            return shlex.quote(url) if quote else url

        return POSTGRES_URL.sub(replaced, text)

    def url_for(self, shown: str) -> str:
        parts = urlsplit(shown)
        base = self.pgbouncer if parts.hostname == PGBOUNCER_HOST else self.direct
        if base is None:
            raise AssertionError(f"{shown} is named, but the page runs without that database")
        kept = [
            (name, self.url_for(value) if name == "due_listen_url" else value)
            for name, value in parse_qsl(parts.query)
            if name.startswith("due_")
        ]
        if not kept:
            return base
        return f"{base}{'&' if '?' in base else '?'}{urlencode(kept)}"
