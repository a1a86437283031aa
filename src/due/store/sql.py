"""Named SQL statements and numbered migrations, loaded from package files.

A backend keeps every statement in its `queries.sql`, each introduced by a
`-- name: <query>` line, and its schema in `migrations/NNNN_<title>.sql`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME_LINE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


def load_queries(package: str) -> dict[str, str]:
    """Each statement without its comments: they are for the reader of the file.
    psycopg parses a statement's text once and caches it only if it is short
    (4 KB): with its comments, the acknowledgement was parsed anew for every
    batch."""
    text = resources.files(package).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise RuntimeError(f"{package}/queries.sql defines {name!r} twice")
        queries[name] = _without_comments(body).strip().rstrip(";")
    return queries


def _without_comments(sql: str) -> str:
    """The statement without `--` comments, whole lines or ends of lines (a `--`
    inside a string literal, after an odd number of quotes on its line, stays),
    and without the indentation of its lines: a statement's text must not span
    lines inside a string literal."""
    lines = []
    for line in sql.splitlines():
        start = line.find("--")
        while start >= 0 and line.count("'", 0, start) % 2:
            start = line.find("--", start + 2)
        code = line if start < 0 else line[:start].rstrip()
        if code or start < 0:  # a line that was all comment goes
            lines.append(code.lstrip())
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(package: str) -> list[Migration]:
    folder = resources.files(package).joinpath("migrations")
    migrations = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            migrations.append(
                Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8"))
            )
    migrations.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{package} migrations are not numbered 1..n: {versions}")
    return migrations


def require_current_schema(applied: int | None, latest: int, where: str) -> None:
    """Refuse to work on a database whose schema this version does not know."""
    from due.errors import NotMigratedError, SchemaTooNewError

    if applied is None or applied == 0:
        raise NotMigratedError(
            f"{where} has no due schema; run `due migrate` (or app.migrate()) first"
        )
    if applied > latest:
        raise SchemaTooNewError(
            f"{where} is at schema version {applied}, but this version of due knows only "
            f"up to {latest}; upgrade due on this host"
        )
    if applied < latest:
        raise NotMigratedError(
            f"{where} is at schema version {applied}, this version of due needs {latest}; "
            "run `due migrate` (or app.migrate())"
        )


def describe_seconds(seconds: float) -> str:
    """A duration for messages stored in the database: 3600 → '1h', 90 → '90s'."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
