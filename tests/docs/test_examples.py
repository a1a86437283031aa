"""Every example of the documentation runs, and shows what it prints.

Each page of docs/ is followed from top to bottom by a reader in an empty
folder (tests/docs/reader.py says how each kind of block is run, pages.py the
markers a page may use, normalise.py what may differ in output). A page marked
`<!-- postgres -->` is followed on PostgreSQL too. Nothing is skipped: a block
the harness cannot run fails its page unless the page marks it a fragment.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_BASE_URL, made_schema, postgres_schema_url
from tests.docs.pages import read_page
from tests.docs.reader import Reader
from tests.docs.urls import Databases, hosts_named
from tests.helpers.pgbouncer import PgBouncer
from tests.helpers.tools import need
from tests.helpers.workers import REPOSITORY

pytestmark = pytest.mark.slow
DOCS = REPOSITORY / "docs"
BUILD_FOLDERS = ("_build",)
DATABASE = POSTGRES_BASE_URL.rsplit("/", 1)[1].split("?")[0]
"""The test database (a page's PgBouncer names it; the page's schema is in it)."""


def pages() -> list[Path]:
    return sorted(
        path
        for path in DOCS.rglob("*.md")
        if not any(part in BUILD_FOLDERS for part in path.relative_to(DOCS).parts)
    )


def runs() -> Iterator[object]:
    """Each page on SQLite, and on PostgreSQL where it says so. A page that names
    a PostgreSQL URL needs the server whatever its store: its id says so, for
    `make test-sqlite` (`-k 'not postgres'`) to leave it out."""
    for path in pages():
        name = str(path.relative_to(REPOSITORY))
        page = read_page(path)
        stores = ["sqlite", "postgres"] if page.postgres else ["sqlite"]
        named = "+postgres" if hosts_named(page.run_text()) else ""
        for store in stores:
            yield pytest.param(
                path, store, id=f"{name}-{store}{named if store == 'sqlite' else ''}"
            )


@pytest.mark.timeout(300)  # the tutorial waits for real jobs and schedules on two stores
@pytest.mark.parametrize(("path", "store"), list(runs()))
def test_the_page_runs_as_written(path: Path, store: str, tmp_path: Path) -> None:
    page = read_page(path, shown_as=path.relative_to(REPOSITORY))
    named = hosts_named(page.run_text())
    with contextlib.ExitStack() as stack:
        databases = Databases(None)
        if store == "postgres" or named:
            schema = stack.enter_context(made_schema())
            databases = Databases(postgres_schema_url(schema))
        if "pgbouncer" in named:
            need("pgbouncer")
            pooler = PgBouncer.start(
                tmp_dir=tmp_path / "pgbouncer", database=DATABASE, search_path=schema
            )
            bouncer = stack.enter_context(pooler)
            databases = Databases(databases.direct, bouncer.url())
        folder = tmp_path / "reader"
        folder.mkdir()
        Reader(page, folder, databases, on_postgres=store == "postgres").follow()


def test_the_harness_finds_the_pages_it_is_to_run() -> None:
    """A page moved out of docs/, or a glob that stops matching, would go unrun
    without failing anything."""
    found = {str(path.relative_to(DOCS)) for path in pages()}
    guides = {
        f"howto/{name}.md"
        for name in (
            "production",
            "schedules",
            "long-work",
            "exactly-once",
            "monitoring",
            "pgbouncer",
            "testing",
            "migrating",
        )
    }
    assert {"tutorial/index.md", *guides} <= found
    assert any(read_page(DOCS / name).postgres for name in found)
