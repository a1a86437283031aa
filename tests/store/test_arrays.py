"""The arrays of batch statements, dumped in binary without a Python step per
element (store/postgres/arrays.py): what PostgreSQL reads is what psycopg's own
dumper sends, for every kind of list due sends and for those it hands back to
psycopg; errors are psycopg's too. And due's own connections use it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.adapt import PyFormat

import due
from due.store.postgres import arrays
from due.store.postgres.arrays import ADAPTERS, FlatListBinaryDumper
from tests.conftest import POSTGRES_BASE_URL

CASES: list[tuple[list[Any], str]] = [
    ([1, 2, 3, None, 2**40], "bigint[]"),
    ([-(2**63), 2**63 - 1], "bigint[]"),
    ([7, 8], "int[]"),  # sent as int8[], cast by the statement
    ([1, None], "int[]"),
    ([1.5, None, -2.0, float("inf"), float("-inf")], "float8[]"),
    ([float("nan")], "float8[]"),
    ([0.25, 3.5], "float8[]"),
    (["a", None, 'é"{}\\', "", "NULL", "x y"], "text[]"),
    (["same"] * 5, "text[]"),
    ([None, None], "float8[]"),  # only Nones: a text[] of NULLs, cast
    ([None], "jsonb[]"),
    (['{"a": 1}', "null", None], "jsonb[]"),
    # Handed back to psycopg: empty, bools, beyond 64 bits, nested.
    ([], "int[]"),
    ([True, False], "bool[]"),
    ([2**70, 1], "numeric[]"),
    ([[1, 2], [3, 4]], "int[]"),
]


@pytest.fixture(scope="module")
def connections() -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any]]]:
    url = POSTGRES_BASE_URL
    with (
        psycopg.connect(url, autocommit=True) as plain,
        psycopg.connect(url, autocommit=True, context=ADAPTERS) as flat,
    ):
        yield plain, flat


def read_back(conn: psycopg.Connection[Any], value: list[Any], cast: str) -> str:
    row = conn.execute(f"SELECT (%b::{cast})::text", (value,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize(
    ("value", "cast"), CASES, ids=[f"{c}-{i}" for i, (_, c) in enumerate(CASES)]
)
def test_postgresql_reads_what_psycopg_would_send(
    connections: tuple[psycopg.Connection[Any], psycopg.Connection[Any]],
    value: list[Any],
    cast: str,
) -> None:
    plain, flat = connections
    assert read_back(flat, value, cast) == read_back(plain, value, cast)


@pytest.mark.parametrize(
    ("value", "dumper"),
    [
        ([1, None, 2], arrays._Int8ArrayDumper),
        ([0.5, 1.5], arrays._Float8ArrayDumper),
        (["a", None], arrays._TextArrayDumper),
        ([None, None], arrays._TextArrayDumper),
    ],
)
def test_flat_lists_take_the_dumpers_in_c(
    connections: tuple[psycopg.Connection[Any], psycopg.Connection[Any]],
    value: list[Any],
    dumper: type,
) -> None:
    _, flat = connections
    chosen = psycopg.adapt.Transformer(flat).get_dumper(value, PyFormat.BINARY)
    assert type(chosen) is dumper


def test_bad_values_fail_as_with_psycopg(
    connections: tuple[psycopg.Connection[Any], psycopg.Connection[Any]],
) -> None:
    plain, flat = connections
    for conn in (plain, flat):
        with pytest.raises(psycopg.errors.CharacterNotInRepertoire):  # NUL: refused by the server
            read_back(conn, ["a\x00b"], "text[]")
        with pytest.raises(UnicodeEncodeError):  # a lone surrogate: refused before sending
            read_back(conn, ["\ud800"], "text[]")
        with pytest.raises(psycopg.DataError, match="mixed types"):
            read_back(conn, [1, 2.5], "float8[]")


def test_due_connections_use_them_and_lent_ones_do_not(postgres_url: str) -> None:
    app = due.App(postgres_url)
    app.migrate()
    try:
        backend = app.store.backend
        with backend.transaction(read=True) as tx:
            own = tx.cursor.connection  # type: ignore[attr-defined]
            assert own.adapters.get_dumper(list, PyFormat.BINARY) is FlatListBinaryDumper
            # `%s` keeps psycopg's text dumper, as its defaults do.
            assert own.adapters.get_dumper(list, PyFormat.AUTO) is psycopg.types.array.ListDumper
        with backend.handler_transaction() as (lent, _):  # type: ignore[attr-defined]
            assert lent.adapters.get_dumper(list, PyFormat.BINARY) is not FlatListBinaryDumper
    finally:
        app.close()
