"""Retry and cancel by filter, on every backend: in batches, resumable when cut
off, on exactly the jobs `app.jobs` lists with the same filter, each job as
the single `retry` or `cancel` would act on it."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

import due
from due import JobState
from due.clock import FakeClock
from due.core.jobs import AttemptError
from due.core.records import ClaimRequest, Completion, JobFilter
from tests.conftest import START

MANY = 3000
"""Several batches' worth: enough to cut a run off half way, few enough to stay fast."""
ALL = 1_000_000


class Interrupted(Exception):
    """What a test raises from `on_batch` to cut a run off after some batches."""


def stop_after(batches: int) -> Callable[[int], None]:
    seen: list[int] = []

    def on_batch(acted: int) -> None:
        seen.append(acted)
        if len(seen) == batches:
            raise Interrupted(acted)

    return on_batch


@pytest.fixture
def tasks(app: due.App) -> dict[str, due.Task]:
    @app.task(name="charge", queue="billing", retry=due.Retry(max_attempts=1))
    def charge(n: int) -> None: ...

    @app.task(name="mail", retry=due.Retry(max_attempts=1))
    def mail(n: int) -> None: ...

    @app.task(name="piece", queue="pieces", retry=due.Retry(max_attempts=1))
    def piece(n: int) -> None: ...

    return {"charge": charge, "mail": mail, "piece": piece}


def fail(app: due.App, queue: str, error: Callable[[int], str], limit: int = ALL) -> list[int]:
    """Claim up to `limit` jobs of `queue` and fail each with `error(id)`; their ids."""
    now = app.store.now()
    failed: list[int] = []
    while len(failed) < limit:
        claimed = app.store.job_claim(ClaimRequest(queue, min(1000, limit - len(failed)), "w", 30))
        if not claimed:
            break
        ends = [
            Completion(
                j.id, j.lease_token, JobState.FAILED, error=AttemptError(1, error(j.id), None, now)
            )
            for j in claimed
        ]
        app.store.job_complete(ends)
        failed += [j.id for j in claimed]
    return failed


def ids(jobs: list[due.Job]) -> set[int]:
    return {job.id for job in jobs}


def timeout_or_value_error(job_id: int) -> str:
    return "TimeoutError: the bank did not answer" if job_id % 3 else "ValueError: bad card"


# --- batches, cut off and resumed -----------------------------------------------------


def test_a_retry_cut_off_half_way_is_finished_by_running_it_again(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    app.enqueue_many([tasks["charge"].request(n) for n in range(MANY)])
    app.enqueue_many([tasks["mail"].request(n) for n in range(100)])
    fail(app, "billing", timeout_or_value_error)
    fail(app, "default", lambda _: "TimeoutError: smtp")
    matching = {"task": "charge", "error_contains": "TimeoutError"}
    expected = ids(app.jobs(state="failed", limit=ALL, **matching))
    assert len(expected) == MANY * 2 // 3

    clock.advance("1m")
    with pytest.raises(Interrupted):
        app.retry_many(**matching, batch_size=500, on_batch=stop_after(2), by="ann")
    first = ids(app.jobs(task="charge", state="queued", limit=ALL))
    assert len(first) == 1000 and first <= expected  # two whole batches, nothing of the third

    clock.advance("1m")
    assert app.retry_many(**matching, batch_size=500, by="ann") == len(expected) - 1000
    assert app.retry_many(**matching, by="ann") == 0  # nothing left: none touched twice
    queued = {job.id: job for job in app.jobs(task="charge", state="queued", limit=ALL)}
    assert set(queued) == expected  # none missed
    # Each retried once: by the run that reached it (a second retry would have
    # moved its due time to the second run's).
    assert {queued[i].run_at for i in first} == {START + timedelta(minutes=1)}
    assert {queued[i].run_at for i in expected - first} == {START + timedelta(minutes=2)}
    assert all(job.attempt == 0 for job in queued.values())
    # What the filter left out is as it was.
    assert len(app.jobs(task="charge", state="failed", limit=ALL)) == MANY - len(expected)
    assert len(app.jobs(task="mail", state="failed", limit=ALL)) == 100
    actions = [(a.action, a.by) for a in app.history()]
    where = "task=charge state=failed error_contains=TimeoutError"
    assert actions == [
        (f"retry 1000 jobs where {where}", "ann"),  # the run cut off: what it committed
        (f"retry {len(expected) - 1000} jobs where {where}", "ann"),
        (f"retry 0 jobs where {where}", "ann"),
    ]


def test_a_cancel_cut_off_half_way_is_finished_and_asks_each_running_job_once(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    app.enqueue_many([tasks["charge"].request(n) for n in range(MANY)])
    running = ids(app.store.job_claim(ClaimRequest("billing", 500, "w", 30)))  # type: ignore[arg-type]
    where = JobFilter(task="charge")
    with pytest.raises(Interrupted):
        app.store.job_cancel_many(where, batch_size=400, on_batch=stop_after(3))
    assert len(app.jobs(state="cancelled", limit=ALL)) == 1200

    assert app.store.job_cancel_many(where, batch_size=400) == MANY - 1200
    assert app.store.job_cancel_many(where, batch_size=400) == 0  # asked already: passed over
    assert app.store.job_count_many("cancel", where) == 0
    asked = app.jobs(state="running", limit=ALL)
    assert ids(asked) == running and all(job.cancel_requested for job in asked)
    assert len(app.jobs(state="cancelled", limit=ALL)) == MANY - len(running)


def test_a_cancel_while_workers_claim_and_finish_jobs_acts_on_each_once(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    """Jobs claimed and finished meanwhile: each ends succeeded (finished
    before the cancel reached it) or cancelled (cancelled queued, or asked
    while running and ended cancelled whatever its attempt then did)."""
    app.enqueue_many([tasks["charge"].request(n) for n in range(MANY)])
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            claimed = app.store.job_claim(ClaimRequest("billing", 50, "w", 30))
            done = [Completion(j.id, j.lease_token, JobState.SUCCEEDED, "null") for j in claimed]
            app.store.job_complete(done)
            if not claimed:
                return

    workers = [threading.Thread(target=worker) for _ in range(2)]
    for thread in workers:
        thread.start()
    try:
        acted = app.cancel_many(task="charge", batch_size=250)
    finally:
        stop.set()
        for thread in workers:
            thread.join(30)
    cancelled = len(app.jobs(state="cancelled", limit=ALL))
    succeeded = len(app.jobs(state="succeeded", limit=ALL))
    assert acted == cancelled and cancelled + succeeded == MANY
    assert app.cancel_many(task="charge") == 0


def test_a_dry_run_counts_and_changes_nothing(app: due.App, tasks: dict[str, due.Task]) -> None:
    app.enqueue_many([tasks["charge"].request(n) for n in range(30)])
    fail(app, "billing", timeout_or_value_error, limit=20)
    assert app.store.job_count_many("retry", JobFilter(task="charge")) == 20
    assert app.retry_many(task="charge", dry_run=True, by="ann", batch_size=7) == 20
    assert app.cancel_many(task="charge", dry_run=True, by="ann") == 10
    assert len(app.jobs(state="failed")) == 20 and len(app.jobs(state="queued")) == 10
    assert app.history() == []  # a count is no action
    # The store's own action retries what its count said (and records nothing:
    # the history is the App's).
    assert app.store.job_retry_many(JobFilter(task="charge")) == 20
    assert len(app.jobs(state="queued")) == 30 and app.history() == []


# --- the same jobs as app.jobs lists ---------------------------------------------------


def world(app: due.App, tasks: dict[str, due.Task], clock: FakeClock) -> dict[str, Any]:
    """Failed jobs of two tasks, queues, keys, errors and times; a parent whose
    pieces partly failed; a workflow with a failed step."""
    charge, mail = tasks["charge"], tasks["mail"]
    app.enqueue_many([charge.options(key=f"acct-{n}").request(n) for n in range(20)])
    app.enqueue_many([mail.request(n) for n in range(10)])
    fail(app, "billing", timeout_or_value_error, limit=10)
    fail(app, "default", lambda _: "TimeoutError: smtp", limit=5)
    clock.advance("1h")
    fail(app, "billing", timeout_or_value_error)
    fail(app, "default", lambda _: "OSError: disk")
    parent = app.batch("piece", [(n,) for n in range(6)])
    fail(app, "pieces", lambda _: "TimeoutError: piece", limit=4)
    flow = app.chain(mail.request(1), charge.request(2), name="month-end")
    fail(app, "default", lambda _: "KeyError: month")
    return {"parent": parent.id, "workflow": flow.id}


FILTERS: list[dict[str, Any]] = [
    {},
    {"task": "charge"},
    {"queue": "default"},
    {"since": "30m"},
    {"until": "30m"},
    {"since": START, "until": START + timedelta(minutes=1)},
    {"error_contains": "TimeoutError"},
    {"error_contains": "timeouterror"},  # case counts: none
    {"key_prefix": "acct-1"},  # acct-1, acct-10 ... acct-19
    {"parent": "parent"},
    {"workflow": "workflow"},
    {"task": "charge", "error_contains": "Value", "since": "2h"},
]


@pytest.mark.parametrize("given", FILTERS, ids=lambda f: ",".join(f) or "all")
def test_a_retry_acts_on_exactly_the_failed_jobs_the_same_filter_lists(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock, given: dict[str, Any]
) -> None:
    made = world(app, tasks, clock)
    where = {name: made[value] if name in made else value for name, value in given.items()}
    listed = {job.id: job for job in app.jobs(state="failed", limit=ALL, **where)}
    before = {job.id: job.state for job in app.jobs(limit=ALL)}
    acted = app.retry_many(**where, batch_size=3)
    after = {job.id: job.state for job in app.jobs(limit=ALL)}
    again = {i for i in after if after[i] != before[i]}
    assert acted == len(again) and set(listed) <= again
    assert all(after[i] == JobState.QUEUED for i in listed)
    # Beyond the filter, only the steps of its steps' workflows (retried with them).
    flows = {job.workflow_id for job in listed.values() if job.workflow_id is not None}
    assert all(app.get(i).workflow_id in flows for i in again - set(listed))


@pytest.mark.parametrize("given", FILTERS, ids=lambda f: ",".join(f) or "all")
def test_a_cancel_acts_on_exactly_the_unfinished_jobs_the_same_filter_lists(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock, given: dict[str, Any]
) -> None:
    made = world(app, tasks, clock)
    app.enqueue_many([tasks["charge"].options(key=f"acct-1{n}x").request(n) for n in range(4)])
    where = {name: made[value] if name in made else value for name, value in given.items()}
    unfinished = [app.jobs(state=s, limit=ALL, **where) for s in ("queued", "running", "waiting")]
    listed = {job.id: job for jobs in unfinished for job in jobs}
    # A parent is cancelled first, and its pieces with it (as `cancel` does).
    with_parent = {i for i, job in listed.items() if job.parent_id in listed}
    ended_before = ids(app.jobs(state="cancelled", limit=ALL))
    assert app.cancel_many(**where, batch_size=3) == len(listed) - len(with_parent)
    assert ids(app.jobs(state="cancelled", limit=ALL)) - ended_before == set(listed)


def test_since_and_until_read_when_a_job_ended_or_else_when_it_was_created(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    app.enqueue_many([tasks["charge"].request(n) for n in range(8)])
    early = fail(app, "billing", timeout_or_value_error, limit=5)  # created and failed at START
    clock.advance("1h")
    late = fail(app, "billing", timeout_or_value_error)  # created at START, failed an hour on
    created_late = ids(app.enqueue_many([tasks["charge"].request(n) for n in range(2)]))
    assert ids(app.jobs(since="30m", limit=ALL)) == {*late, *created_late}
    assert ids(app.jobs(until="30m", limit=ALL)) == set(early)
    at_start = {"since": START, "until": START + timedelta(seconds=1)}
    assert ids(app.jobs(**at_start, limit=ALL)) == set(early)
    assert app.retry_many(since="30m") == len(late)
    assert app.cancel_many(until=START + timedelta(minutes=30)) == len(late)  # created at START


# --- each job as the single action would ----------------------------------------------


def test_retried_pieces_count_again_on_their_waiting_parent(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(n,) for n in range(5)])
    fail(app, "pieces", lambda _: "TimeoutError", limit=3)
    assert app.get(parent.id).pieces.failed == 3  # type: ignore[union-attr]
    assert app.retry_many(parent=parent.id) == 3
    waiting = app.get(parent.id)
    assert waiting.state == JobState.WAITING and waiting.pieces.failed == 0  # type: ignore[union-attr]


def test_a_failed_step_is_retried_with_its_workflow(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    flow = app.chain(tasks["mail"].request(1), tasks["mail"].request(2), name="month-end")
    fail(app, "default", lambda _: "KeyError: month")  # the first: the second is cancelled
    assert app.workflow_status(flow.id).state == "failed"
    assert app.retry_many(error_contains="KeyError") == 2  # the step, and the one after it
    status = app.workflow_status(flow.id)
    states = [step.state for step in status.steps.values()]
    assert status.state == "running" and status.steps_ended == 0
    assert states == [JobState.QUEUED, JobState.WAITING]  # the second waits for the first
    assert app.retry_many(workflow=flow.id) == 0


def test_a_cancelled_waiting_step_is_counted_on_its_workflow(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    """It ended, uncounted: its workflow stayed running for ever (and `cancel`
    of one waiting step did the same)."""
    mail = tasks["mail"]
    flows = [app.chain(*(mail.request(n) for n in range(3)), name="c") for _ in range(2)]
    second = list(app.workflow_status(flows[0].id).steps.values())[1]
    app.cancel(second.job_id)
    status = app.workflow_status(flows[0].id)
    assert status.steps_ended == 2  # it, and the step after it (its policy cancels it)
    assert app.cancel_many(state="waiting") == 1  # the other workflow's second step
    assert app.workflow_status(flows[1].id).steps_ended == 2
    assert app.cancel_many() == 2  # the first steps, queued
    assert {app.workflow_status(flow.id).state for flow in flows} == {"cancelled"}


def test_what_the_single_retry_refuses_is_passed_over(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    """A piece whose parent has settled is not retried (as `retry` refuses it);
    nor is a job whose key another live job holds now."""
    parent = app.batch("piece", [(n,) for n in range(2)], on_piece_failure="fail")
    fail(app, "pieces", lambda _: "boom", limit=1)
    assert app.get(parent.id).state == JobState.FAILED
    held = app.enqueue_many([tasks["charge"].options(key="acct-1").request(1)])[0]
    fail(app, "billing", lambda _: "boom")
    app.enqueue_many([tasks["charge"].options(key="acct-1").request(2)])  # holds the key now
    assert app.retry_many(task="piece") == 0
    assert app.retry_many(task="charge") == 0
    assert app.get(held.id).state == JobState.FAILED


def test_a_waiting_parent_is_cancelled_with_its_pieces(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    parent = app.batch("piece", [(n,) for n in range(3)])
    (running,) = app.store.job_claim(ClaimRequest("pieces", 1, "w", 30))
    assert app.cancel_many(state="waiting") == 1
    pieces = {job.id: job for job in app.jobs(parent=parent.id)}
    assert app.get(parent.id).state == JobState.CANCELLED
    assert pieces[running.id].cancel_requested
    assert sorted(j.state.value for j in pieces.values()) == ["cancelled", "cancelled", "running"]


# --- a dry run counts what the action then does ----------------------------------------


def mixed(app: due.App, tasks: dict[str, due.Task], clock: FakeClock) -> dict[str, Any]:
    """`world`, and the cases where the action acts on fewer jobs than match:
    two failed jobs with one key (a retry takes one), a failed job whose key a
    queued job holds, a running workflow step with two steps waiting after it,
    a running job asked to stop already, a second parent with queued pieces
    and a running piece; and queued jobs."""
    made = world(app, tasks, clock)
    charge, mail = tasks["charge"], tasks["mail"]
    for n in range(2):
        app.enqueue_many([charge.options(key="twice").request(n)])
        fail(app, "billing", lambda _: "ValueError: twice")
    app.enqueue_many([charge.options(key="acct-held").request(0)])
    fail(app, "billing", lambda _: "TimeoutError: held")
    app.enqueue_many([charge.options(key="acct-held").request(1)])  # queued: holds the key
    flow = app.chain(mail.request(7), mail.request(8), mail.request(9), name="running")
    app.store.job_claim(ClaimRequest("default", 1, "w", 30))  # its first step
    asked = app.enqueue_many([mail.request(20)])[0]
    app.store.job_claim(ClaimRequest("default", 1, "w", 30))
    app.cancel(asked.id)  # running, asked to stop: a cancel passes it over
    app.batch("piece", [(n,) for n in range(4)])
    app.store.job_claim(ClaimRequest("pieces", 1, "w", 30))
    app.enqueue_many([mail.request(n) for n in range(30, 35)])
    return {**made, "flow": flow.id}


COUNTED: list[tuple[str, dict[str, Any]]] = [
    *(("retry", given) for given in FILTERS),
    *(("cancel", given) for given in FILTERS),
    ("retry", {"state": "cancelled"}),
    ("retry", {"state": None}),
    ("retry", {"state": None, "task": "charge"}),
    ("retry", {"key_prefix": "twice"}),
    ("cancel", {"workflow": "flow"}),
    ("cancel", {"state": "waiting"}),
    ("cancel", {"state": "running"}),
    ("cancel", {"queue": "pieces"}),
    ("cancel", {"args_contains": {"n": 8}}),
]


@pytest.mark.parametrize(
    ("action", "given"), COUNTED, ids=lambda f: ",".join(f) if isinstance(f, dict) else f
)
def test_a_dry_run_counts_the_jobs_the_action_then_acts_on(
    app: due.App,
    tasks: dict[str, due.Task],
    clock: FakeClock,
    action: str,
    given: dict[str, Any],
) -> None:
    """The count is read in the database, the action reads the jobs and acts
    on each as the single action would: a count that drifts from the action's
    rules (keys, pieces, workflows, running jobs) fails here."""
    made = mixed(app, tasks, clock)
    where = {
        name: made.get(value, value) if name != "args_contains" else value
        for name, value in given.items()
    }
    act = getattr(app, f"{action}_many")
    seen: list[int] = []
    counted = act(**where, dry_run=True, on_batch=seen.append)
    assert seen == [counted]
    assert act(**where) == counted
    assert act(**where, dry_run=True) == 0 or action == "retry"  # acted on: no longer matches


def test_the_mixed_jobs_hold_each_case_a_plain_count_gets_wrong(
    app: due.App, tasks: dict[str, due.Task], clock: FakeClock
) -> None:
    """The jobs above are worth the test: counting the jobs that match would
    be wrong for both actions (keys, the steps a cancel takes with it)."""
    mixed(app, tasks, clock)
    failed = [app.jobs(state=s, limit=ALL) for s in ("failed", "cancelled")]
    unfinished = [app.jobs(state=s, limit=ALL) for s in ("queued", "running", "waiting")]
    retried, cancelled = app.retry_many(state=None), app.cancel_many()
    assert retried != sum(map(len, failed))
    assert cancelled != sum(len([j for j in js if not j.cancel_requested]) for js in unfinished)


def test_a_capped_count_stops_at_its_cap(app: due.App, tasks: dict[str, due.Task]) -> None:
    app.enqueue_many([tasks["mail"].request(n) for n in range(12)])
    assert app.cancel_many(dry_run=True, cap=5) == 5  # 5: that many or more
    assert app.cancel_many(dry_run=True, cap=12) == 12
    assert app.cancel_many(dry_run=True, cap=13) == 12
    assert app.retry_many(dry_run=True, cap=1) == 0
    with pytest.raises(due.ConfigurationError, match="dry_run=True"):
        app.cancel_many(cap=5)
    with pytest.raises(due.ConfigurationError, match="cap must be 1 or more"):
        app.cancel_many(dry_run=True, cap=0)
    assert len(app.jobs(state="queued")) == 12
    # The store's own count, which the dry runs ask.
    queued = JobFilter(state=JobState.QUEUED, task="mail")
    assert app.store.job_count_many("cancel", queued, 5) == 5
    assert app.store.job_count_many("cancel", queued) == 12
    assert app.store.job_count_many("retry", JobFilter(task="mail")) == 0


# --- the history, and bad input ---------------------------------------------------------


def test_one_action_is_recorded_with_the_filter_the_count_and_who(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    app.enqueue_many([tasks["charge"].request(n) for n in range(12)])
    assert app.cancel_many(queue="billing", key_prefix="x y", by="ops") == 0
    assert app.cancel_many(queue="billing", since=START, by="ops") == 12
    assert app.cancel_many(queue="billing") == 0  # without by=: not recorded
    actions = app.history(queue="billing")
    assert [(a.action, a.by, a.job_id) for a in actions] == [
        ("cancel 0 jobs where queue=billing key_prefix='x y'", "ops", None),
        (f"cancel 12 jobs where queue=billing since={START.isoformat()}", "ops", None),
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda app: app.retry_many(state="succeeded"), "cannot retry succeeded jobs"),
        (lambda app: app.cancel_many(state="failed"), "cannot cancel failed jobs"),
        (lambda app: app.cancel_many(state="done"), "unknown job state 'done'"),
        (lambda app: app.retry_many(since="10:02"), "since: '10:02' is neither a duration"),
        (lambda app: app.jobs(until="2030-01-01T10:02"), "has no time zone"),
        (lambda app: app.retry_many(since=-300), "cannot be negative"),
        (lambda app: app.retry_many(parent="seven"), "parent must be a whole number"),
        (lambda app: app.retry_many(batch_size=0), "batch_size must be 1 or more"),
    ],
)
def test_bad_filters_are_refused_naming_what_to_fix(
    app: due.App, tasks: dict[str, due.Task], call: Callable[[due.App], object], message: str
) -> None:
    with pytest.raises(due.ConfigurationError, match=message):
        call(app)


def test_a_filter_no_stored_text_can_match_matches_nothing(
    app: due.App, tasks: dict[str, due.Task]
) -> None:
    tasks["charge"].enqueue(1)
    assert app.cancel_many(task="charge\x00") == 0
    assert app.jobs(error_contains="\x00") == []


@pytest.mark.parametrize(
    ("search", "whose"),
    [
        ({"code": "7391-secret"}, "@app.task(redact=...) of 'reset'"),
        ({"user": {"CODE": "7391"}}, "@app.task(redact=...) of 'reset'"),  # nested, any case
        ({"items": [{"pin": "0000"}]}, "App(redact=...)"),  # in a list
        ({"api_key": "sk-1"}, "due.DEFAULT_REDACT"),
    ],
)
def test_a_search_by_a_redacted_name_is_refused_on_every_call(
    backend_url: str, search: dict[str, object], whose: str
) -> None:
    """Shown as •••, a value searched for would be confirmed to whoever guesses
    it (issue 41's redaction): refused, with or without the task, by `jobs`,
    `retry_many` and `cancel_many` alike, before anything is done."""
    app = due.App(backend_url, redact=["pin"])
    app.migrate()

    @app.task(name="reset", redact=["code"])
    def reset(user: dict[str, str]) -> None: ...

    job = reset.enqueue({"email": "ada@example.com", "code": "7391-secret"})
    key = next(iter(search)) if "user" not in search else "CODE"
    key = {"items": "pin"}.get(key, key)
    message = f"args_contains cannot search by {key!r}: {whose} redacts it"
    for task in ("reset", None):
        for call in (
            app.jobs,
            partial(app.retry_many, by="ann"),
            partial(app.cancel_many, by="ann"),
        ):
            with pytest.raises(due.ConfigurationError, match=re.escape(message)):
                call(task=task, args_contains=search)
    assert app.get(job.id).state == JobState.QUEUED and app.history() == []
    # Another argument of the same jobs is searched as before.
    assert [j.id for j in app.jobs(task="reset", args_contains={"email": "ada@example.com"})] == [
        job.id
    ]
    app.close()


def test_a_name_redacted_by_another_task_is_searched_within_a_task_that_shows_it(
    app: due.App,
) -> None:
    """A filter on a task refuses that task's names; without a task, every
    task's (it may match any job)."""

    @app.task(name="reset", redact=["code"])
    def reset(code: str) -> None: ...

    @app.task(name="promo")
    def promo(code: str) -> None: ...

    shown = promo.enqueue(code="SPRING")
    assert ids(app.jobs(task="promo", args_contains={"code": "SPRING"})) == {shown.id}
    with pytest.raises(due.ConfigurationError, match="of 'reset'"):
        app.jobs(args_contains={"code": "SPRING"})
