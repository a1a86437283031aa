"""The thin per-backend layer under the store: connections, transactions, named
statements, the database's now, and values in and out.

Every store operation is written once (store/jobs.py, work.py, long_work.py,
schedules.py, registry.py) over this layer; SQLite and PostgreSQL differ only
in their `queries.sql` and in how they connect. A statement is run by name
with parameters given as Python values:

- `run(name, params)` runs it once; `run_each(name, rows, params)` runs it for
  each row of a batch: PostgreSQL in one statement (each field of the rows
  becomes an array of the same name: `%(id)b::bigint[]`), SQLite once per row
  (`:id`), both returning the rows of every execution; `params` are shared by
  every row; the rows may come as `Columns`, a list per field;
- `run_many(name, columns, rows, params)` inserts many new rows, read as they
  are sent (PostgreSQL: batches of arrays, in pipelined statements; SQLite:
  executemany);
- on the way in, times are aware datetimes, lists are lists (arrays, or JSON
  text read with `json_each` on SQLite) and JSON values are JSON text already
  encoded; rows come back as dicts in Python types (times aware, in UTC; JSON
  columns decoded, or left as text when they do not decode);
- `now` is the parameter for "now": the injected clock's instant, or (on
  PostgreSQL) None to let the database decide — `coalesce(%(now)s, now())`;
  `instant()` is a concrete now for computations in Python.

Capabilities the operations ask about, instead of asking which backend it is:
`locks_rows` (PostgreSQL: rows are locked, so parents are locked before their
pieces and rescues skip what others hold; SQLite has one writer at a time)
`single_writer` (SQLite: the worker folds its acknowledgements into its
claims, one commit for both; a claim promotes due timers in a statement of its
own), `leaves_dead_rows` (PostgreSQL: updates and deletes leave row versions
that only a vacuum clears) and `counting_statements` (PostgreSQL: the statement
that writes acknowledgements counts their ends in due_job_stats itself, in a
data-modifying WITH, so a batch is one round trip; elsewhere the operation
counts them with `count_endings`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from due.errors import StoreError, StoreUnavailableError

Rows = list[dict[str, Any]]
Values = tuple[tuple[str, ...], list[tuple[Any, ...]]]
"""Column names, and the rows as tuples (`Transaction.run_values`)."""


class Columns(dict[str, list[Any]]):
    """A batch given as one list per field, all of one length: the shape
    PostgreSQL sends it in, built without a dict per row (an acknowledgement of
    100 jobs spent a third of its client time making and unmaking those)."""

    def rows(self) -> list[dict[str, Any]]:
        """The batch as a dict per row (for a backend that runs it row by row)."""
        names = list(self)
        fields = zip(*self.values(), strict=True)
        return [dict(zip(names, values, strict=True)) for values in fields]


Batch = Sequence[Mapping[str, Any]] | Columns
"""The rows of `run_each`: a mapping per row, or `Columns`."""


class StatementRefused(StoreError):
    """The database sent back an error for a statement (a constraint it broke, a
    value out of range), or the driver refused a value before sending it: its
    transaction wrote nothing. Not an error met reading a reply after the
    commit."""


class ValueRefused(StatementRefused):
    """What a statement carried could not be stored: a value the database refused
    (out of range, not in its character set, malformed JSON, a constraint the
    row broke) or one the driver could not even encode (a lone surrogate, an
    integer too large). The fault of the rows sent, not of the database: a
    batch refused so is written again row by row (batches.py), and only a row
    refused so on its own may be stripped of its details. A statement timeout
    or a full disk is not this: the batch is kept whole and tried again. (Of
    psycopg's own refusals only the encoding errors are translated so: its
    DataError is met reading a reply too, after the commit.)"""


class DuplicateError(StatementRefused):
    """A row with the same unique key exists (a schedule's name, a job's key taken
    in a race): the operation that met it turns it into the error it means."""


class LockWaitTimeout(StoreUnavailableError):
    """A statement gave up waiting for a row another transaction holds (the
    transaction's lock wait was bounded on purpose: `bound_lock_wait`)."""


class Transaction(Protocol):
    """One transaction on the job database (or the caller's own, on their connection)."""

    locks_rows: bool

    @property
    def now(self) -> Any:
        """The value of the `now` parameter of this transaction's statements."""

    def instant(self) -> datetime:
        """A concrete now, on the store's clock (the database's by default)."""

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> Rows: ...

    def run_values(self, query: str, params: Mapping[str, Any] | None = None) -> Values:
        """`run` for a hot statement: column names, and rows as tuples, with
        times as datetimes but JSON as the statement returns it (text)."""

    def run_each(
        self, query: str, rows: Batch, params: Mapping[str, Any] | None = None
    ) -> Rows: ...

    def run_many(
        self,
        query: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
        params: Mapping[str, Any],
    ) -> int:
        """An insert of many rows, read from `rows` as they are sent, so the
        database can write some while the rest are made; returns how many rows
        it wrote. PostgreSQL sends them as arrays named after `columns`
        (`%(id)b::bigint[]`), a batch to a statement, the statements pipelined;
        SQLite runs the statement once per row (executemany), the row's values
        as ?1, ?2... and then the values of `params`, in their order."""


class AsyncTransaction(Protocol):
    """A transaction on a caller's async connection (PostgreSQL's AsyncConnection)."""

    locks_rows: bool

    @property
    def now(self) -> Any: ...

    async def run(self, query: str, params: Mapping[str, Any] | None = None) -> Rows: ...

    async def run_values(self, query: str, params: Mapping[str, Any] | None = None) -> Values: ...

    async def run_each(
        self, query: str, rows: Batch, params: Mapping[str, Any] | None = None
    ) -> Rows: ...

    async def run_many(
        self,
        query: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
        params: Mapping[str, Any],
    ) -> int: ...


class Lane(Protocol):
    """Autocommitted statements from the worker's event loop, without a thread
    (PostgreSQL's async connections: postgres/loop_lane.py)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def statement(self) -> AbstractAsyncContextManager[AsyncTransaction]: ...


class ChangeFeed(Protocol):
    """Tells a waiting thread that something it waits for may have happened."""

    def messages(self, timeout: float) -> list[str]:
        """What was heard, waiting up to `timeout` seconds and returning as soon as
        something was: notification payloads (PostgreSQL), or "" for a change that
        says nothing more (a SQLite commit; a new connection, which heard nothing
        of what came before it: the first call returns [""] at once)."""

    def wait(self, timeout: float) -> bool:
        """Whether something may have changed (`messages`, without the messages)."""

    def close(self) -> None: ...


class Backend(Protocol):
    url: str
    single_writer: bool
    locks_rows: bool
    leaves_dead_rows: bool
    counting_statements: bool

    def transaction(
        self,
        *,
        read: bool = False,
        single: bool = False,
        unbounded: bool = False,
        leader: bool = False,
    ) -> AbstractContextManager[Transaction]:
        """A transaction that commits when the block exits cleanly.

        `read`: reads only; `single`: one statement, which PostgreSQL runs in
        autocommit (no BEGIN and COMMIT round trips); `unbounded`: bulk work the
        user asked for, or maintenance that takes as long as the table is big
        (no statement, lock or idle limits; with `single`, no statement limit);
        `leader`: the leader's
        fenced transaction (PostgreSQL ends it if it idles 2 s: a paused leader
        must not hold the lease row)."""

    def on_connection(
        self, connection: Any, call: str, *, atomic: bool = False
    ) -> AbstractContextManager[Transaction]:
        """The caller's own sync connection, inside their open transaction (refused,
        naming `call`, when it is not one of this backend's). `atomic`: the
        statements run here are kept all or none (a savepoint in the caller's
        transaction; a transaction of their own on a connection in autocommit),
        so that an operation of several statements that fails half way leaves
        nothing in the caller's transaction, which stays usable."""

    def on_async_connection(
        self, connection: Any, call: str, *, atomic: bool = False
    ) -> AbstractAsyncContextManager[AsyncTransaction]:
        """The caller's own async connection (PostgreSQL only); `atomic` as above."""

    def handler_transaction(self) -> AbstractContextManager[tuple[Any, Transaction]]:
        """A transaction for a handler's own writes (`ctx.transaction()`): the raw
        connection to give the handler, and the transaction on it."""

    def writing_on_this_thread(self) -> bool:
        """Whether this thread is inside a write transaction of the store's (a
        handler's `ctx.transaction()` on SQLite, whose one writer it holds)."""

    def now(self) -> datetime: ...

    def migrate(self) -> list[int]: ...

    def empty(self) -> None:
        """Delete every row due keeps but the migrations' record (tests)."""

    def schema_version(self) -> int | None: ...

    def check_schema(self) -> None: ...

    def watch_endings(self) -> ChangeFeed:
        """A feed that wakes when a job may have ended (PostgreSQL: a notification
        sent by the ending transaction; SQLite: any commit)."""

    def watch_jobs(self) -> ChangeFeed:
        """A feed of jobs becoming claimable ('<queue> <run_at epoch>') and of
        running jobs asked to stop ('!cancel <id>') on PostgreSQL; of any commit
        ("") on SQLite."""

    def loop_lane(self, connections: int) -> Lane | None:
        """Up to `connections` connections for the worker's claims and
        acknowledgements on its event loop; None where every call goes through
        a thread (SQLite)."""

    def loop_statement(self) -> AbstractAsyncContextManager[AsyncTransaction | None]:
        """One autocommitted statement from the running event loop, on the
        store's own connection of that loop; None where there is none to use
        (SQLite; the loop's first enqueue; another coroutine of the loop has
        it): take a thread then."""

    def close(self) -> None: ...
