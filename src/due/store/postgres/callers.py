"""Cursors on a caller's own connection (`enqueue(connection=...)`,
`get(connection=...)`), reading as due's own connections read.

A framework may set its connections up for itself: Django loads `jsonb` as
text (its JSONField decodes it) and binds parameters on the client (its
default cursor class). due's statements on such a connection still need
psycopg's plain cursor and psycopg's own loaders for the types they read;
the caller's connection itself is left as it is.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.adapt import AdaptersMap
from psycopg.pq import Format
from psycopg.rows import DictRow, dict_row

READ_TYPES = (
    "bool",
    "float8",
    "int2",
    "int4",
    "int8",
    "interval",
    "json",
    "jsonb",
    "numeric",
    "text",
    "timestamp",
    "timestamptz",
    "varchar",
)
"""The types due's statements read (and their arrays)."""


def callers_cursor(connection: psycopg.Connection[Any]) -> psycopg.Cursor[DictRow]:
    """A plain psycopg cursor on the caller's connection, with psycopg's loaders."""
    cursor = psycopg.Cursor(connection, row_factory=dict_row)
    _plain_loaders(cursor.adapters)
    return cursor


def callers_async_cursor(
    connection: psycopg.AsyncConnection[Any],
) -> psycopg.AsyncCursor[DictRow]:
    """`callers_cursor` for an async connection."""
    cursor = psycopg.AsyncCursor(connection, row_factory=dict_row)
    _plain_loaders(cursor.adapters)
    return cursor


def _plain_loaders(adapters: AdaptersMap) -> None:
    for oid in _OIDS:
        for form in (Format.TEXT, Format.BINARY):
            loader = psycopg.adapters.get_loader(oid, form)
            if loader is not None and adapters.get_loader(oid, form) is not loader:
                adapters.register_loader(oid, loader)


def _oids() -> tuple[int, ...]:
    found: list[int] = []
    for name in READ_TYPES:
        info = psycopg.adapters.types[name]
        found += [info.oid, info.array_oid] if info.array_oid else [info.oid]
    return tuple(found)


_OIDS = _oids()
