"""redact_url hides every spelling of a password and keeps the rest."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from due.redaction import redact_url

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"postgresql://app:{SECRET}@db:5432/app", "postgresql://app:***@db:5432/app"),
        (f"postgresql://db/app?password={SECRET}&x=1", "postgresql://db/app?password=***&x=1"),
        (
            f"postgres://db/app?sslmode=require&sslpassword={SECRET}",
            "postgres://db/app?sslmode=require&sslpassword=***",
        ),
        (f"postgresql://db/app?PassWord={SECRET}", "postgresql://db/app?PassWord=***"),
        (f"postgresql://db/app?pass%77ord={SECRET}", "postgresql://db/app?pass%77ord=***"),
        (
            f"postgresql://app:{SECRET}@h1:5432,h2:5433/app",
            "postgresql://app:***@h1:5432,h2:5433/app",
        ),
        (f"postgresql://app:{SECRET}@[::1]:5432/app", "postgresql://app:***@[::1]:5432/app"),
        (f"redis://:{SECRET}@cache:6379/0", "redis://:***@cache:6379/0"),
        (f"rediss://cache?password={SECRET}", "rediss://cache?password=***"),
        (f"host=db password={SECRET} dbname=app", "host=db password=*** dbname=app"),
        (f"host=db password = '{SECRET} \\' x' dbname=app", "host=db password = *** dbname=app"),
        (f"PASSWORD={SECRET}", "PASSWORD=***"),
        # Spaces libpq refuses: the whole of the password is hidden all the same.
        (f"postgresql://app:{SECRET} x@db/app", "postgresql://app:***@db/app"),
        (f"postgresql://app:{SECRET} @x@db/app", "postgresql://app:***@db/app"),
        (f"postgresql://db/app?password={SECRET} x&y=1", "postgresql://db/app?password=***&y=1"),
        (f"host=db password={SECRET} x z dbname=app", "host=db password=*** dbname=app"),
        (
            f"'postgresql://app:{SECRET}@db/app'; give one",
            "'postgresql://app:***@db/app'; give one",
        ),
        ("postgresql://app@db/app?sslmode=require", "postgresql://app@db/app?sslmode=require"),
        ("sqlite:///folder/due.db", "sqlite:///folder/due.db"),
    ],
)
def test_a_password_is_hidden_and_the_rest_kept(text: str, shown: str) -> None:
    assert redact_url(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        f"postgresql://app:{SECRET}@x@db/app",  # a raw "@" in the password
        f"postgresql://app:{SECRET}/x@db/app",  # a raw "/"
        f"postgresql://app:{SECRET}?x@db/app",  # a raw "?"
        f"postgresql://db/app?due_listen_url={quote(f'postgresql://a:{SECRET}@h/db', safe='')}",
        f"postgresql://db/app?due_listen_url=postgresql://a:{SECRET}@h/db",
        f"postgresql://db/app?due_listen_url={quote(f'postgresql://h/db?password={SECRET}')}",
        f"two: mysql://a:{SECRET}@h/db and redis://:{SECRET}@h",
    ],
)
def test_a_password_in_an_odd_place_is_hidden_too(text: str) -> None:
    assert SECRET not in redact_url(text)
