"""Retry or cancel every job the jobs page's filter matches: "Retry all N"
and "Cancel all N" on the page, a confirmation that shows N and the filter,
then a POST (with the CSRF token) that acts through `app.retry_many` /
`app.cancel_many`, recorded in the history as one action by the dashboard's
user, as the command line records its own.

N is what the action's dry run counts (the same filter, the same states, the
same rules: one statement in the database that reads no job), on the jobs
page up to `COUNT_CAP` (a page must not count a million jobs to draw a
button: past it the button says "10,000+"), on the confirmation up to
`CONFIRM_CAP`; past that it offers the command line instead.

Jobs go on changing between the confirmation and the POST: the POST acts on
the filter as confirmed (its times fixed, so "the last 30 minutes" does not
move on), and the page it answers with says how many it touched, and how
that differs from the N confirmed.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from due import job_filters
from due.core.jobs import Job
from due.errors import ConfigurationError, DueError
from due.web.forms import read_form, typed_job_id, who
from due.web.job_search import ACTIONS, PageFilter

if TYPE_CHECKING:
    from due.app import App
    from due.web.app import Pages

COUNT_CAP = 10_000
"""The most jobs the jobs page counts for a button."""
CONFIRM_CAP = 50_000
"""The most jobs the confirmation counts, and offers to act on: one request
acting on more would run for minutes (about 2,000 jobs a second on
PostgreSQL), past any proxy's patience; the command line shows its progress
and finishes what a cut-off run left."""
SAMPLE = 10
"""The jobs the confirmation lists."""


@dataclass(frozen=True)
class Offer:
    """A bulk action the jobs page offers for its filter."""

    action: str
    count: int
    more: bool
    """More than `count` match (the page stopped counting)."""

    @property
    def label(self) -> str:
        return f"{self.action.capitalize()} all {self.count:,}{'+' if self.more else ''}"


def offers(app: App, shown: PageFilter) -> list[Offer]:
    """The actions worth a button for this (readable) filter: a state each
    takes, and at least one job to act on."""
    found = []
    for action in ACTIONS:
        if not shown.bulk_states(action):
            continue
        count = counted(app, action, shown, COUNT_CAP)
        if count is None:
            found.append(Offer(action, COUNT_CAP, more=True))
        elif count:
            found.append(Offer(action, count, more=False))
    return found


def confirmation(pages: Pages, request: Request) -> Response:
    """What "Retry all N" leads to: N counted again, the filter, a few of the
    jobs, and the form that acts, its times fixed."""
    action = request.path_params["action"]
    shown = PageFilter.read(request.query_params)
    refused = _refusal(pages, request, shown, action)
    if refused is not None:
        return refused
    fixed = shown.fixed(pages.app.store.now)
    return pages.render(
        request,
        "bulk_confirm.html",
        action=action,
        count=counted(pages.app, action, fixed, CONFIRM_CAP),
        cap=CONFIRM_CAP,
        command=command_line(action, fixed),
        sample=_sample(pages.app, action, fixed),
        states=[state.value for state in fixed.bulk_states(action)],
        described=fixed.described(pages.app),
        terms=fixed.terms,
        back=shown.query(),
    )


async def carry_out(pages: Pages, request: Request) -> Response:
    """The confirmed action: on the filter as it stands, then how many it touched."""
    action = request.path_params["action"]
    form = await read_form(request)
    shown = PageFilter.read(form)
    refused = pages.refused(request, form)
    if refused is None:
        refused = _refusal(pages, request, shown, action)
    if refused is not None:
        return refused
    # As confirmed (a form without an `until` acts on the jobs there are now),
    # and never more than one request should act on.
    shown = shown.fixed(pages.app.store.now)
    if await run_in_threadpool(counted, pages.app, action, shown, CONFIRM_CAP) is None:
        return pages.render(
            request,
            "error.html",
            409,
            message=f"more than {CONFIRM_CAP:,} jobs match: {command_line(action, shown)}",
        )
    try:
        done = await run_in_threadpool(_run, pages.app, action, shown, by=who(request))
    except DueError as error:
        return pages.render(request, "error.html", 409, message=str(error))
    return pages.render(
        request,
        "bulk_done.html",
        action=action,
        done=done,
        expected=typed_job_id(form.get("expected")),
        described=shown.described(pages.app),
        back=shown.query(),
    )


def counted(app: App, action: str, shown: PageFilter, cap: int | None = None) -> int | None:
    """How many jobs `action` would act on (its dry run: one count in the
    database, no job read); None past `cap`."""
    if cap is None:
        return _run(app, action, shown, dry_run=True)
    count = _run(app, action, shown, dry_run=True, cap=cap + 1)
    return None if count > cap else count


def command_line(action: str, shown: PageFilter) -> str:
    """The `due retry`/`due cancel` command acting on the same filter."""
    flags = [
        f"--{name.replace('_', '-')} {shlex.quote(value)}" for name, value in shown.terms.items()
    ]
    return " ".join(["due", action, "--app APP", *flags, "--yes"])


def _refusal(pages: Pages, request: Request, shown: PageFilter, action: str) -> Response | None:
    """The page saying why `action` cannot be done by this filter, or None."""
    if action not in ACTIONS:
        return pages.render(request, "error.html", 404, message="no such action")
    problem = shown.problem(pages.app) or job_filters.unknown_task(pages.app, shown.get("task"))
    if problem is None and not shown.bulk_states(action):
        states = ", ".join(state.value for state in ACTIONS[action])
        problem = (
            f"nothing to {action} by this filter: the dashboard acts on all jobs only "
            "with a filter (task, queue, time, error, key prefix or arguments; not an "
            f"id or key search), in a state the {action} takes ({states})"
        )
    return None if problem is None else pages.render(request, "error.html", 400, message=problem)


def _sample(app: App, action: str, shown: PageFilter) -> list[Job]:
    """A few of the jobs the action would act on, newest first in each state."""
    jobs: list[Job] = []
    for state in shown.bulk_states(action):
        jobs += app.jobs(**{**shown.options(), "state": state}, limit=SAMPLE - len(jobs))
    return jobs


def _run(app: App, action: str, shown: PageFilter, **extra: Any) -> int:
    """`app.<action>_many` on the filter's terms, in the states it acts on."""
    act: Callable[..., int] = app.retry_many if action == "retry" else app.cancel_many
    states = shown.bulk_states(action)
    if not states:  # never every job: the pages refuse it first, and so does this
        raise ConfigurationError(f"no filter to {action} by")
    state = states[0] if len(states) == 1 else None  # None: every state it takes
    return act(**{**shown.options(), "state": state}, **extra)
