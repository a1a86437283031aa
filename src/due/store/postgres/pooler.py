"""Working through a transaction-mode connection pooler (PgBouncer and the managed
poolers that copy it).

Such a pooler lends a server connection for one transaction (or one
autocommitted statement) at a time, so nothing may outlive a transaction on
it: psycopg's server-side prepared statements (named `_pg3_N` per client,
they collide between clients sharing a server connection), session settings
(they would leak to other clients), and LISTEN (notifications go to whoever
holds the server connection when they arrive). With `due_pooler=transaction`
in the URL, or `App(url, pooler="transaction")`, due turns those off:
statements are not prepared, its time bounds are set per transaction
(`SET LOCAL`), and wake-ups come from a direct connection (`listen_url`) or,
without one, from polling every POLL_SECONDS.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg

from due.errors import ConfigurationError
from due.redaction import redact_url

POOLER_PARAMETER = "due_pooler"
LISTEN_URL_PARAMETER = "due_listen_url"
POOLER_MODES = ("transaction", "session")
POLL_SECONDS = 0.25
"""Through a transaction-mode pooler without a `listen_url`: how often an idle
worker looks for due jobs, and `app.wait` for an end. A job enqueued for now
starts within about this much (plus a claim) of its enqueue."""

HINT = (
    "a transaction-mode connection pooler (PgBouncer, say) seems to be between due "
    "and PostgreSQL: add due_pooler=transaction to the database URL (or "
    'App(url, pooler="transaction")), or connect directly or through a session-mode pool'
)


@dataclass(frozen=True)
class PoolerSettings:
    """How due connects: directly (or through a session-mode pool), or through
    a transaction-mode pooler, and where it listens for notifications."""

    url: str
    """The URL to connect to, without due's own parameters (libpq refuses them)."""
    transaction_pooler: bool = False
    listen_url: str | None = None
    """A direct URL for LISTEN (through a transaction pooler; None: poll)."""

    @classmethod
    def from_url(
        cls, url: str, pooler: str | None = None, listen_url: str | None = None
    ) -> PoolerSettings:
        """Take `due_pooler` and `due_listen_url` out of the URL's query; the
        keyword arguments, when given, win over them."""
        parts = urlsplit(url)
        # The query is cut as written, never re-encoded: libpq reads %20 as a
        # space and a + as a plus (options=-c%20statement_timeout%3D5s).
        pairs = [pair for pair in parts.query.split("&") if pair]
        own = {
            unquote(name): unquote(value)
            for name, _, value in (pair.partition("=") for pair in pairs)
            if unquote(name).startswith("due_")
        }
        unknown = set(own) - {POOLER_PARAMETER, LISTEN_URL_PARAMETER}
        if unknown:
            raise ConfigurationError(
                f"unknown due parameter in the database URL: {', '.join(sorted(unknown))}; "
                f"due reads {POOLER_PARAMETER} and {LISTEN_URL_PARAMETER}"
            )
        rest = [pair for pair in pairs if not unquote(pair.partition("=")[0]).startswith("due_")]
        mode = pooler if pooler is not None else own.get(POOLER_PARAMETER)
        if mode is not None and mode not in POOLER_MODES:
            raise ConfigurationError(
                f"pooler {mode!r} is not one of {', '.join(POOLER_MODES)}: say transaction "
                "when a pooler lends a server connection per transaction (PgBouncer's "
                "pool_mode = transaction); session (or nothing) otherwise"
            )
        transaction = mode == "transaction"
        listen = listen_url if listen_url is not None else own.get(LISTEN_URL_PARAMETER)
        if listen is not None and not transaction:
            raise ConfigurationError(
                "listen_url is for a transaction-mode pooler (due_pooler=transaction): "
                "without one, due listens on the database URL itself"
            )
        if listen is not None and not listen.startswith(("postgresql://", "postgres://")):
            raise ConfigurationError(
                "listen_url must be a postgresql:// URL to PostgreSQL itself, "
                f"got {redact_url(listen)!r}"
            )
        clean = url if not own else urlunsplit(parts._replace(query="&".join(rest)))
        return cls(clean, transaction, listen)

    def connect_options(self) -> dict[str, object]:
        """psycopg connection options: no prepared statements through the pooler."""
        return {"prepare_threshold": None} if self.transaction_pooler else {}


def is_pooler_breakage(error: psycopg.Error) -> bool:
    """Whether `error` is what a transaction-mode pooler does to prepared
    statements or startup parameters meant for one session."""
    if isinstance(
        error, psycopg.errors.InvalidSqlStatementName | psycopg.errors.DuplicatePreparedStatement
    ):
        return True
    text = str(error)
    return "prepared statement" in text or "unsupported startup parameter" in text


class PollingFeed:
    """A change feed that hears nothing and says "look again" every POLL_SECONDS:
    the wake-ups through a transaction-mode pooler without a direct listen URL."""

    def __init__(self, monotonic: Callable[[], float], interval: float = POLL_SECONDS) -> None:
        self._monotonic = monotonic
        self._interval = interval
        self._closed = threading.Event()
        self._next = monotonic()  # the first call says "look" at once

    def messages(self, timeout: float) -> list[str]:
        wait = self._next - self._monotonic()
        if wait > timeout:
            self._closed.wait(timeout)
            return []
        if wait > 0 and self._closed.wait(wait):
            return []
        self._next = self._monotonic() + self._interval
        return [""]

    def wait(self, timeout: float) -> bool:
        return bool(self.messages(timeout))

    def close(self) -> None:
        self._closed.set()
