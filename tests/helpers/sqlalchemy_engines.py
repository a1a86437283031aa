"""SQLAlchemy engines on a test's database, through each driver due runs on."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from due.store.sqlite.backend import path_from_url

SYNC_DRIVERS = {"sqlite": ["pysqlite"], "postgres": ["psycopg"]}
ASYNC_DRIVERS = {"sqlite": ["aiosqlite"], "postgres": ["asyncpg", "psycopg_async"]}


def search_path(url: str) -> str | None:
    """The schema a test's PostgreSQL URL puts first (`options=-csearch_path=...`)."""
    options = parse_qs(urlsplit(url).query).get("options", [""])[0]
    return options.removeprefix("-csearch_path=") or None


def sqlalchemy_url(app_url: str, driver: str) -> tuple[str, dict[str, Any]]:
    """The SQLAlchemy URL and connect_args for the App's database through `driver`."""
    if app_url.startswith("sqlite"):
        scheme = "sqlite" if driver == "pysqlite" else "sqlite+aiosqlite"
        return f"{scheme}:///{path_from_url(app_url)}", {}
    parts = urlsplit(app_url)
    base = f"{parts.netloc}{parts.path}"
    if driver == "asyncpg":  # asyncpg takes no libpq options: the schema as a setting
        schema = search_path(app_url)
        settings = {"server_settings": {"search_path": schema}} if schema else {}
        return f"postgresql+asyncpg://{base}", settings
    return f"postgresql+psycopg://{base}?{parts.query}", {}


def sync_engine(app_url: str, driver: str | None = None, **options: Any) -> Any:
    import sqlalchemy

    driver = driver or ("pysqlite" if app_url.startswith("sqlite") else "psycopg")
    url, connect_args = sqlalchemy_url(app_url, driver)
    return sqlalchemy.create_engine(url, connect_args=connect_args, **options)


def async_engine(app_url: str, driver: str, **options: Any) -> Any:
    from sqlalchemy.ext.asyncio import create_async_engine

    url, connect_args = sqlalchemy_url(app_url, driver)
    return create_async_engine(url, connect_args=connect_args, **options)
