"""The statements as the backends load them from their queries.sql."""

from __future__ import annotations

import pytest
from psycopg import _queries

from due.store.postgres.backend import QUERIES as POSTGRES_QUERIES
from due.store.sql import _without_comments
from due.store.sqlite.backend import QUERIES as SQLITE_QUERIES


@pytest.mark.parametrize("queries", [POSTGRES_QUERIES, SQLITE_QUERIES], ids=["postgres", "sqlite"])
def test_statements_are_loaded_without_their_comments(queries: dict[str, str]) -> None:
    assert [name for name, text in queries.items() if "--" in text] == []
    assert "FOR UPDATE SKIP LOCKED" in POSTGRES_QUERIES["claim_jobs"]  # the code stays


def test_a_comment_goes_and_a_double_dash_in_a_string_stays() -> None:
    sql = "SELECT 1, -- one\n-- a line of comment\n  '--', 'it''s' -- two\nFROM t"
    assert _without_comments(sql) == "SELECT 1,\n'--', 'it''s'\nFROM t"


@pytest.mark.parametrize("queries", [POSTGRES_QUERIES, SQLITE_QUERIES], ids=["postgres", "sqlite"])
def test_no_string_literal_spans_lines(queries: dict[str, str]) -> None:
    """The loader drops each line's indentation (a statement's length decides
    whether psycopg caches its parse): a literal spanning lines would change."""
    spanning = [
        name for name, text in queries.items() for line in text.splitlines() if line.count("'") % 2
    ]
    assert spanning == []


def test_every_postgres_statement_is_short_enough_for_psycopg_to_cache_its_parse() -> None:
    """psycopg parses a statement's placeholders once per text, for texts up to
    this length; longer ones (complete_jobs with its comments) at every run."""
    longest = max(POSTGRES_QUERIES, key=lambda name: len(POSTGRES_QUERIES[name].encode()))
    length = len(POSTGRES_QUERIES[longest].encode())
    assert length <= _queries.MAX_CACHED_STATEMENT_LENGTH, (longest, length)
