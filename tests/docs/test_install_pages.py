"""The how-to pages whose examples need an extra, followed in a new virtual
environment that has only what the page's install step says
(tests/helpers/fresh_install.py): a package the page uses but does not name
fails here. (Django's page: tests/contrib_django/test_docs_page.py, on the
newest Python.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.pages import read_page
from tests.docs.reader import Reader
from tests.helpers.fresh_install import built_wheel, fresh_environment
from tests.helpers.workers import REPOSITORY

pytestmark = [pytest.mark.slow, pytest.mark.fresh_install]
PAGES = ("docs/howto/sqlalchemy.md", "docs/howto/tracing.md")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.timeout(900)  # a new environment's install, then the page
@pytest.mark.parametrize("name", PAGES)
def test_the_page_runs_with_only_what_it_says_to_install(
    name: str, wheel: Path, tmp_path: Path
) -> None:
    page = read_page(REPOSITORY / name, shown_as=Path(name))
    python = fresh_environment(tmp_path / "venv", page, wheel)
    folder = tmp_path / "reader"
    folder.mkdir()
    Reader(page, folder, python=python, own_source=False).follow()
