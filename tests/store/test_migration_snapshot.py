"""A fresh `migrate` builds exactly the schema checked in under tests/store/schema/.

A migration that changes the schema must change the snapshot with it, so the
diff of a pull request shows the schema it leaves behind, on both backends.
After a deliberate change, write the new snapshot with:

    DUE_WRITE_SCHEMA_SNAPSHOT=1 .venv/bin/python -m pytest tests/store/test_migration_snapshot.py
"""

from __future__ import annotations

import os
import pathlib
import sqlite3

import psycopg
import pytest

import due
from due.store.sqlite.backend import path_from_url

SNAPSHOTS = pathlib.Path(__file__).parent / "schema"


def sqlite_schema(url: str) -> str:
    with sqlite3.connect(path_from_url(url)) as conn:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' AND sql IS NOT NULL ORDER BY type, name"
        ).fetchall()
    return "\n\n".join(f"-- {kind} {name}\n{sql};" for kind, name, sql in rows) + "\n"


def postgres_schema(url: str) -> str:
    with psycopg.connect(url) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = %s "
            "ORDER BY table_name, ordinal_position",
            (schema,),
        ).fetchall()
        constraints = conn.execute(
            "SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid) "
            "FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
            "WHERE n.nspname = %s ORDER BY 1, 2",
            (schema,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
            "ORDER BY tablename, indexname",
            (schema,),
        ).fetchall()
    lines = ["-- columns: table, column, type, nullable, default"]
    lines += [" | ".join(str(value) for value in row) for row in columns]
    lines += ["", "-- constraints"]
    lines += [" | ".join(str(value) for value in row) for row in constraints]
    lines += ["", "-- indexes"]
    lines += [f"{table} | {name} | {definition}" for table, name, definition in indexes]
    return "\n".join(lines).replace(f"{schema}.", "") + "\n"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_fresh_migrate_builds_the_checked_in_schema(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue(f"{backend}_url"))
    app = due.App(url)
    try:
        app.migrate()
    finally:
        app.close()
    built = sqlite_schema(url) if backend == "sqlite" else postgres_schema(url)
    snapshot = SNAPSHOTS / f"{backend}.sql"
    if os.environ.get("DUE_WRITE_SCHEMA_SNAPSHOT"):
        snapshot.write_text(built)
    assert built == snapshot.read_text(), (
        f"a fresh migrate no longer builds {snapshot}; if the change is meant, write the "
        "new snapshot (see this module's docstring) and commit it with the migration"
    )
