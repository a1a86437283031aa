"""Storage: one store (`store.Store`) over two backends, chosen by URL."""

from __future__ import annotations

from typing import Any

from due.clock import Clock
from due.errors import ConfigurationError
from due.redaction import redact_url
from due.store.store import Store

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


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
    scheme = shown.split("://", 1)[0] if "://" in shown else shown
    raise ConfigurationError(
        f"unsupported database URL scheme {scheme!r}: use sqlite:///path/to.db "
        "(embedded, one host) or postgresql://user@host/dbname (many hosts)"
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
