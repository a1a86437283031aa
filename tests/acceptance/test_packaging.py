"""The package as a library depends on it: built as a wheel, installed without extras."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

import due
from tests.helpers.workers import REPOSITORY


@pytest.fixture(scope="module")
def metadata(tmp_path_factory: pytest.TempPathFactory) -> Message:
    """The METADATA of a wheel built from a copy of the source tree."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPOSITORY / name, source / name)
    shutil.copytree(REPOSITORY / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--wheel-dir", str(wheels), str(source)),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = wheels.glob("due-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "due/py.typed" in names
        assert any(n.endswith("queries.sql") for n in names)
        assert "due/web/templates/job.html" in names and "due/web/static/htmx.min.js" in names
        assert any(n.endswith("licenses/LICENSE") for n in names)
        text = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    return Parser().parsestr(text.decode())


def test_requirements_are_ranges_and_postgres_is_an_extra(metadata: Message) -> None:
    requires = metadata.get_all("Requires-Dist") or []
    assert requires, "the wheel declares no requirements"
    pinned = [r for r in requires if "==" in r.split(";")[0]]
    assert not pinned, f"exact pins in the published requirements: {pinned}"
    plain = [r for r in requires if "extra ==" not in r]
    assert {re.split(r"[<>=!~\[;]", r)[0] for r in plain} == {
        "click",
        "rich",
        "croniter",
        "prometheus-client",
    }
    web = [r for r in requires if r.startswith(("starlette", "jinja2", "uvicorn"))]
    assert len(web) == 3 and all('extra == "web"' in r for r in web), web
    psycopg = [r for r in requires if r.startswith("psycopg")]
    assert psycopg and all('extra == "postgres' in r for r in psycopg), psycopg
    # Our test tools are a dependency group, not part of what users install.
    assert not [r for r in requires if r.startswith(("pytest", "mypy", "ruff"))]


def test_one_version_licence_and_links(metadata: Message) -> None:
    assert metadata["Version"] == due.__version__
    assert metadata["License-Expression"] == "MIT"
    classifiers = metadata.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Programming Language :: Python :: 3.13" in classifiers
    assert "Typing :: Typed" in classifiers
    links = metadata.get_all("Project-URL") or []
    assert any(link.startswith("Changelog") for link in links), links
    assert "postgres" in (metadata.get_all("Provides-Extra") or [])


def test_without_the_postgres_extra_sqlite_works_and_postgres_says_what_to_install(
    tmp_path: Path,
) -> None:
    """psycopg made unimportable, as after `pip install due`: SQLite serves, and a
    postgresql:// URL names the extra to install instead of failing on an import."""
    script = textwrap.dedent(
        f"""
        import sys
        class NoPostgres:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary"):
                    raise ModuleNotFoundError(f"No module named {{name!r}}")
                return None
        sys.meta_path.insert(0, NoPostgres())

        import due
        from due.testing import drain
        with due.App("sqlite:///{tmp_path / "lib.db"}") as app:
            @app.task(name="double")
            def double(n: int) -> int:
                return 2 * n
            app.migrate()
            job = double.enqueue(21)
            drain(app)
            assert app.get(job.id).result == 42
        try:
            due.App("postgresql://127.0.0.1/app")
        except due.ConfigurationError as error:
            print(error)
        assert "psycopg" not in sys.modules
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPOSITORY
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'due[postgres]'" in done.stdout, done.stdout
