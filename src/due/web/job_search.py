"""The jobs page's filter: read from the page's query (or the bulk forms),
checked once, and handed to `app.jobs`, `app.retry_many` and
`app.cancel_many` as the same options, so that "Retry all N" acts on the
jobs the page lists.

Its terms are those of `due jobs`: queue, state, task, a time range, error
text, a key prefix and arguments (JSON containment, `args_contains`). The
page's other search, by id or exact key (`q`), is a lookup, not a bulk
filter: the bulk actions take no exact key.

Arguments are searched by the names the dashboard shows, never by a
redacted one: the page would otherwise say, by listing a job or not, whether
a hidden value is the one typed (a dashboard user may guess a token one
search at a time). The command line, with the database at hand, may.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from due import job_filters
from due.core.jobs import JobState
from due.core.records import JobFilter
from due.errors import ConfigurationError
from due.shown_arguments import HIDDEN

if TYPE_CHECKING:
    from due.app import App

TERMS = (
    "queue",
    "state",
    "task",
    "since",
    "until",
    "error_contains",
    "key_prefix",
    "args_contains",
)
"""The page's filter fields, each named as `app.jobs` names its option."""
ACTIONS: dict[str, tuple[JobState, ...]] = {
    # The states each action takes, as app.retry_many and app.cancel_many do.
    "retry": (JobState.FAILED, JobState.CANCELLED),
    "cancel": (JobState.WAITING, JobState.QUEUED, JobState.RUNNING),
}
UNFILTERED_STATES: dict[str, tuple[JobState, ...]] = {
    # With no state chosen: retry the failed ones (as `due retry` does), cancel
    # every unfinished one (as `due cancel` does).
    "retry": (JobState.FAILED,),
    "cancel": ACTIONS["cancel"],
}


@dataclass(frozen=True)
class PageFilter:
    """The filter terms given (text as typed, blanks dropped) and the id-or-key search."""

    terms: dict[str, str]
    search: str = ""

    @classmethod
    def read(cls, params: Mapping[str, str]) -> PageFilter:
        terms = {name: str(params.get(name) or "").strip() for name in TERMS}
        return cls(
            {name: text for name, text in terms.items() if text}, params.get("q", "").strip()
        )

    def get(self, name: str) -> str | None:
        return self.terms.get(name)

    def options(self) -> dict[str, Any]:
        """The terms as `app.jobs` options (None for each one not given)."""
        return {name: self.terms.get(name) for name in TERMS}

    def query(self, **extra: Any) -> str:
        """The page's query string for these terms (and `extra`)."""
        kept: dict[str, Any] = dict(self.terms)
        if self.search:
            kept["q"] = self.search
        return urlencode({**kept, **{k: v for k, v in extra.items() if v is not None}})

    def problem(self, app: App) -> str | None:
        """Why this filter cannot be searched (a message naming the field), or None."""
        state = self.terms.get("state")
        if state is not None and state not in {s.value for s in JobState}:
            return f"unknown state {state!r}"
        try:
            where = self._where(app)
        except ConfigurationError as error:
            return str(error)
        return _redacted_search(where, redacted_names(app, where.task))

    def bulk_states(self, action: str) -> tuple[JobState, ...]:
        """The states `action` acts on for this filter (a readable one): none
        when it has nothing to act on (no filter at all, an id or key search,
        or a state the action does not take)."""
        if not self.terms or self.search:
            return ()
        state = self.terms.get("state")
        if state is None:
            return UNFILTERED_STATES[action]
        return (JobState(state),) if JobState(state) in ACTIONS[action] else ()

    def fixed(self, now: Callable[[], datetime]) -> PageFilter:
        """These terms with `since` and `until` as the times they name now: a
        duration ("30m") moves on, and a confirmed filter must not. Without an
        `until`, it is now: what the operator confirmed is the jobs there were,
        not those that end (or are enqueued) after. (`until` is the first moment
        left out: the confirmation's own instant is in.)"""
        terms = dict(self.terms)
        terms.setdefault("until", (now() + timedelta(microseconds=1)).isoformat())
        for name in ("since", "until"):
            if name in terms:
                moment = job_filters.moment(terms[name], now, name)
                assert moment is not None
                terms[name] = moment.isoformat()
        return PageFilter(terms, self.search)

    def described(self, app: App) -> str:
        """The terms as the history writes them (hidden values as •••)."""
        where = self._where(app)
        return job_filters.describe(where, hide=redacted_names(app, where.task))

    def _where(self, app: App) -> JobFilter:
        """The filter as `app.jobs` reads it (a known state)."""
        state = self.terms.get("state")
        options = {**self.options(), "state": JobState(state) if state else None}
        return job_filters.build(app.store.now, **options)


def redacted_names(app: App, task: str | None) -> frozenset[str]:
    """The argument names whose values the dashboard hides for `task`'s jobs
    (its task's names, the app's included), or for any task's: the names
    `app.jobs` refuses to search by."""
    return app.redacted_names(task)


def _redacted_search(where: JobFilter, names: frozenset[str]) -> str | None:
    key = job_filters.hidden_key(where, names)
    if key is None:
        return None
    return (
        f"arguments: {key!r} is redacted (shown as {HIDDEN}), so the dashboard does "
        "not search by it; search by another argument"
    )
