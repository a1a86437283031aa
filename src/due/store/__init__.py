"""Storage: one store (`store.Store`) over two backends, chosen by URL."""

from __future__ import annotations

from typing import Any

from due.clock import Clock
from due.errors import ConfigurationError
from due.redaction import redact_url
from due.store.store import Store

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")
SQLITE_SCHEMES = ("sqlite", "sqlite3")


def open_store(url: str, clock: Clock, **options: Any) -> Store:
    """The store for `url`: sqlite:///path.db or postgresql://user@host/db."""
    if url.startswith(SQLITE_PREFIX):
        from due.store.sqlite.backend import SQLiteBackend

        return Store(SQLiteBackend(url, clock, **options))
    if url.startswith(POSTGRES_PREFIXES):
        require_postgres_driver()
        from due.store.postgres.backend import PostgresBackend

        return Store(PostgresBackend(url, clock, **options))
    shown = redact_url(url)  # a libpq key=value string has no scheme, and may hold a password
    if shown.split(":", 1)[0].lower() in SQLITE_SCHEMES:
        raise ConfigurationError(_sqlite_slashes(shown))
    scheme = shown.split("://", 1)[0] if "://" in shown else shown
    raise ConfigurationError(
        f"unsupported database URL scheme {scheme!r}: use sqlite:///path/to.db "
        "(embedded, one host) or postgresql://user@host/dbname (many hosts)"
    )


def _sqlite_slashes(shown: str) -> str:
    """Why a `sqlite:` URL without `sqlite:///` is refused: most often its scheme
    is right and its slashes are not (`sqlite://due.db` reads `due.db` as a
    host). Names the URL it likely meant when the rest is a plain path (`shown`
    is redacted: a user or password is never moved into the suggestion)."""
    scheme, rest = shown.split(":", 1)
    path = rest.lstrip("/")
    if not path or any(mark in path for mark in "@?#*"):
        path = "due.db"
    lead = (
        "the scheme is right, the slashes are not"
        if scheme == "sqlite"
        else f"the scheme is sqlite, not {scheme}"
    )
    return (
        f"database URL {shown!r}: {lead}: a SQLite URL is sqlite:/// and the file's "
        f"path, three slashes before a relative path (sqlite:///{path} is {path} in the "
        "working directory) and four before an absolute one (sqlite:////abs/path/due.db)"
    )


def require_postgres_driver() -> None:
    """Refuse a postgresql:// URL, with the fix, when the PostgreSQL extra is missing
    (`pip install due` alone serves SQLite and pulls no PostgreSQL driver)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as error:
        raise ConfigurationError(
            "a postgresql:// URL needs due's PostgreSQL extra: pip install 'due[postgres]' "
            "(or 'due[postgres-binary]' to bring libpq along, where the system has none); "
            f"importing the driver failed: {error}"
        ) from None


__all__ = ["Store", "open_store", "require_postgres_driver"]
