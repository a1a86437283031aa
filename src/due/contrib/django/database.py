"""Which database the backend's jobs live in, read from Django's settings.

`OPTIONS["DATABASE"]` names an alias of `DATABASES`: due's tables go into that
database, and a job enqueued inside `transaction.atomic()` on that alias is
written on Django's own connection, so it exists only if the transaction
commits. `OPTIONS["URL"]` names any database instead (due's own connection:
nothing is shared with Django's transactions).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

SQLITE_ENGINE = "django.db.backends.sqlite3"
POSTGRES_ENGINES = ("django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis")


def url_of_alias(alias: str) -> str:
    """A due database URL for the Django database `alias` (as its settings say
    now: Django's test runner changes NAME to its test database's)."""
    from django.conf import settings

    entry = settings.DATABASES.get(alias)
    if entry is None:
        known = ", ".join(sorted(settings.DATABASES)) or "none"
        raise ImproperlyConfigured(
            f'due: OPTIONS["DATABASE"] is {alias!r}, which is not in DATABASES (it has {known})'
        )
    engine = entry.get("ENGINE", "")
    if engine == SQLITE_ENGINE:
        name = str(entry.get("NAME") or "")
        if not name or name == ":memory:" or name.startswith("file:"):
            raise ImproperlyConfigured(
                f"due: database {alias!r} is not a SQLite file ({name!r}); due's workers "
                "run in other processes and need a file path as NAME"
            )
        return f"sqlite:///{name}"
    if engine in POSTGRES_ENGINES:
        return _postgres_url(entry)
    raise ImproperlyConfigured(
        f"due: database {alias!r} uses {engine!r}; due stores jobs in SQLite or PostgreSQL. "
        'Give OPTIONS["URL"] to keep the jobs in another database'
    )


LIBPQ_OPTIONS = frozenset(
    {
        "application_name", "channel_binding", "connect_timeout", "gssencmode",
        "keepalives", "keepalives_count", "keepalives_idle", "keepalives_interval",
        "options", "passfile", "service", "sslcert", "sslcrl", "sslkey", "sslmode",
        "sslpassword", "sslrootcert", "target_session_attrs",
    }
)  # fmt: skip
"""OPTIONS of Django's PostgreSQL backend that are libpq's: due's connections get them too."""
DJANGO_ONLY_OPTIONS = frozenset(
    {"cursor_factory", "isolation_level", "pool", "server_side_binding", "client_encoding"}
)
"""OPTIONS that shape Django's own connections only (due's connections need none)."""


def _postgres_url(entry: dict[str, Any]) -> str:
    user = quote(str(entry.get("USER") or ""), safe="")
    password = quote(str(entry.get("PASSWORD") or ""), safe="")
    host = str(entry.get("HOST") or "")
    port = str(entry.get("PORT") or "")
    name = quote(str(entry.get("NAME") or ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    query: dict[str, str] = {}
    if host.startswith("/"):  # a socket directory: libpq takes it as a parameter
        query["host"] = host
        host = ""
    elif ":" in host:  # an IPv6 address
        host = f"[{host}]"
    netloc = f"{credentials}{host}{':' + port if port and host else ''}"
    if port and not host:
        query["port"] = port
    options = dict(entry.get("OPTIONS") or {})
    unknown = set(options) - LIBPQ_OPTIONS - DJANGO_ONLY_OPTIONS
    if unknown:
        raise ImproperlyConfigured(
            f"due: the database's OPTIONS {', '.join(sorted(unknown))} would make due's own "
            "connections differ from Django's (due cannot apply them); give the backend "
            'OPTIONS["URL"] to say how due connects'
        )
    query.update({key: str(value) for key, value in options.items() if key in LIBPQ_OPTIONS})
    url = f"postgresql://{netloc}/{name}"
    return f"{url}?{urlencode(query, quote_via=quote)}" if query else url


def connection_in_transaction(alias: str | None) -> Any:
    """The driver connection of Django's `alias` when the calling thread is in a
    transaction on it (`transaction.atomic()`, or autocommit off), else None
    (outside a transaction, a job written on due's own connection is committed
    just the same, and sooner)."""
    if alias is None:
        return None
    connection = connections[alias]
    # atomic(), or autocommit turned off (AUTOCOMMIT: False, set_autocommit(False)):
    # either way the caller's commit decides.
    if not connection.in_atomic_block and connection.get_autocommit():
        return None
    # As Django's own queries do: no write into a transaction already doomed.
    connection.validate_no_broken_transaction()
    connection.ensure_connection()
    return connection.connection
