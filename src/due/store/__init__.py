"""Storage: one protocol (`protocol.Store`), two backends, chosen by URL."""

from __future__ import annotations

from typing import Any

from due.clock import Clock
from due.errors import ConfigurationError
from due.store.protocol import Store

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def open_store(url: str, clock: Clock, **options: Any) -> Store:
    """The store for `url`: sqlite:///path.db or postgresql://user@host/db."""
    if url.startswith(SQLITE_PREFIX):
        from due.store.sqlite.store import SQLiteStore

        return SQLiteStore(url, clock, **options)
    if url.startswith(POSTGRES_PREFIXES):
        from due.store.postgres.store import PostgresStore

        return PostgresStore(url, clock, **options)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise ConfigurationError(
        f"unsupported database URL scheme {scheme!r}: use sqlite:///path/to.db "
        "(embedded, one host) or postgresql://user@host/dbname (many hosts)"
    )


__all__ = ["Store", "open_store"]
