"""Several statements on a caller's connection, kept all or none.

A bulk enqueue on a connection of the caller's is several statements. One the
database refuses half way must leave nothing of the others in the caller's
transaction, and must not end that transaction (the caller's own work in it
goes on). Each backend says which statements do that for the connection's
state (`on_connection(atomic=True)`): a savepoint in the caller's transaction,
or a transaction of its own on a connection in autocommit. This runs them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple


class AllOrNone(NamedTuple):
    start: tuple[str, ...]
    keep: str
    undo: tuple[str, ...]


SAVEPOINT = AllOrNone(
    ("SAVEPOINT due_all_or_none",),
    "RELEASE SAVEPOINT due_all_or_none",
    ("ROLLBACK TO SAVEPOINT due_all_or_none", "RELEASE SAVEPOINT due_all_or_none"),
)
"""In the caller's transaction: rolled back to on failure, the transaction goes
on with the caller's own work."""


@contextlib.contextmanager
def kept_all_or_none(
    execute: Callable[[str], object], statements: AllOrNone, driver_error: type[Exception]
) -> Iterator[None]:
    """Run `statements.start`, then the body; `keep` after it, `undo` if it
    raised. An undo that fails too (the database already rolled back, say,
    taking the savepoint with it) is not reported: the body's error is."""
    for statement in statements.start:
        execute(statement)
    try:
        yield
    except BaseException:
        with contextlib.suppress(driver_error):
            for statement in statements.undo:
                execute(statement)
        raise
    execute(statements.keep)
