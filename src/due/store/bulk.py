"""Retry or cancel every job a filter matches, one batch per transaction.

A million matching jobs must never hold a long lock or a long transaction,
and an interrupted run must be finished by running it again, touching no job
twice. So:

- The jobs are read with the statements `app.jobs` lists them with (jobs.py,
  `list_jobs` and its siblings: the same filter, so the action matches
  exactly what `due jobs` shows), a page of `batch_size` at a time, newest
  first, each page starting below the smallest id of the one before (keyset
  by id: no page reads back through the jobs before it).
- Each page is acted on in one transaction, its parents locked first and
  the jobs taken in id order (the lock order every batch of writes keeps).
  The plain cases in one statement for the page (`cancel_queued_jobs`: the
  queued jobs; `retry_plain_jobs`: the jobs without key, parent or
  workflow), a round trip a batch rather than a job on PostgreSQL; every
  other job by the steps of the single operation (`jobs.cancel_in`,
  `steps.retry_steps`), so a bulk action follows the rules of `app.cancel`
  and `app.retry` for keys, pieces, parents, workflow steps and running jobs.
- A job acted on no longer matches: a retried job is queued (no longer failed
  or cancelled), a cancelled one has ended, and a running one asked to stop
  is passed over by every later `cancel_many` (it is asked already). A run
  cut off commits its whole batches and nothing of the one in flight; running
  it again acts on the rest and on none twice. Within one run the keyset
  moves past every job it read, so a job retried, run and failed again while
  the run goes on is not retried twice by it.
- A job the single operation refuses (a piece whose parent has settled, a
  job whose key another live job holds) is passed over and left as it was.
- A step of a workflow is retried with its workflow, as `retry_workflow`
  retries it (`_retry_workflows`), once per run, its workflow's own
  transaction: its workflow's failed and cancelled steps run again, those
  after it waiting for it. The count includes them.

A dry run (`count`) reads no job: one statement per action
(`count_retryable_jobs`, `count_cancellable_jobs`) counts in the database,
no further than a cap, the jobs the action would act on by the rules above
(the same filter; what the single operation refuses left out; keys one job
each; workflows once, with their failed and cancelled steps; the jobs a
cancelled waiting job takes with it left out, as the action leaves them out
of its count). The action's count may still differ by what changes
meanwhile, and where the statement does not follow the action's cascades:
- a waiting job that a waiting job cancelled before it takes with it (its
  piece, a step after it) is left out of the action's count only when both
  are in one batch; the statement leaves it out always;
- a cascade through jobs the filter does not match (a matched step after an
  unmatched step that a cancel ends by its policy; the pieces of a parent
  that fails as its matched pieces are cancelled) ends matched jobs the
  action does not count; the statement counts them.
Each state is read through its own index where it has one (as list_jobs
reads it), so that a count of the few failed or waiting jobs among many
queued ones does not read them all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

from due.core.jobs import Job, JobState
from due.core.records import JobFilter
from due.errors import InvalidStateError
from due.store import jobs, steps, workflows
from due.store.backend import Backend, DuplicateError, Transaction
from due.store.conflicts import retried_on_conflict
from due.store.settling import lock_parents, settle
from due.store.stats import count_endings

DEFAULT_BATCH_SIZE = 2000
"""Jobs per transaction: a few milliseconds of locks each on PostgreSQL."""
RETRYABLE = (JobState.FAILED, JobState.CANCELLED)
CANCELLABLE = (JobState.WAITING, JobState.QUEUED, JobState.RUNNING)
"""In this order: a waiting parent is cancelled with its pieces, as `cancel`
cancels it, before its pieces one by one could settle it."""

OnBatch = Callable[[int], None]
"""Called after each batch commits, with the count acted on so far."""


def pages(db: Backend, where: JobFilter, batch_size: int) -> Iterator[list[Job]]:
    """The jobs `where` matches, newest first, a page at a time (keyset by id)."""
    before = where.before
    while True:
        page = jobs.list_jobs(db, dataclasses.replace(where, before=before, limit=batch_size))
        if page:
            yield page
        if len(page) < batch_size:
            return
        before = page[-1].id


COUNTS = {"retry": "count_retryable_jobs", "cancel": "count_cancellable_jobs"}
NO_CAP = 2**62
"""A cap no count reaches: count them all."""


def count(db: Backend, action: str, where: JobFilter, cap: int | None = None) -> int:
    """How many jobs `action` ("retry" or "cancel") would act on by `where`,
    counted in the database no further than `cap` (a count equal to it means
    that many or more). One statement, in one read transaction: nothing is
    read but the count."""
    with db.transaction(read=True) as tx:
        params = {**jobs.filter_params(where), "cap": cap or NO_CAP, "now": tx.now}
        rows = tx.run(COUNTS[action], params)
    return int(rows[0]["n"])


def retry_many(
    db: Backend,
    where: JobFilter,
    run_now: bool,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: OnBatch | None = None,
) -> int:
    """Retry the failed or cancelled jobs `where` matches (its state: one of
    those, or None for both); how many were retried (`count` says beforehand)."""
    acted = 0
    states = RETRYABLE if where.state is None else (where.state,)
    retried_workflows: set[int] = set()
    for state in states:
        for page in pages(db, dataclasses.replace(where, state=state), batch_size):
            acted += _retry_batch(db, [job.id for job in page if job.workflow_id is None], run_now)
            steps = {job.workflow_id for job in page if job.workflow_id is not None}
            acted += _retry_workflows(db, steps - retried_workflows)
            retried_workflows |= steps
            if on_batch is not None:
                on_batch(acted)
    return acted


def _retry_workflows(db: Backend, workflow_ids: set[int]) -> int:
    """A failed step is retried with its workflow (as `retry_workflow`): the
    workflow's failed and cancelled steps run again, each after the steps it
    comes after, and the workflow's counts are taken back. Retried alone, a
    step would leave the steps after it cancelled and its workflow ended. A
    workflow the retry refuses (pruned in part) is passed over."""
    return sum(_retried_workflow(db, workflow) for workflow in sorted(workflow_ids))


def _retried_workflow(db: Backend, workflow_id: int) -> int:
    try:
        return len(workflows.retry(db, workflow_id) or [])
    except InvalidStateError:
        return 0


def cancel_many(
    db: Backend,
    where: JobFilter,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: OnBatch | None = None,
) -> int:
    """Cancel the queued, running and waiting jobs `where` matches (its state:
    one of those, or None for all three), running ones by asking them to stop;
    how many were cancelled or asked (`count` says beforehand)."""
    acted = 0
    states = CANCELLABLE if where.state is None else (where.state,)
    for state in states:
        for page in pages(db, dataclasses.replace(where, state=state), batch_size):
            ids = [job.id for job in page if not job.cancel_requested]
            acted += _cancel_batch(db, ids)
            if on_batch is not None:
                on_batch(acted)
    return acted


@retried_on_conflict
def _cancel_batch(db: Backend, ids: Sequence[int]) -> int:
    if not ids:
        return 0
    with db.transaction() as tx:
        lock_parents(tx, ids)
        # The queued ones in one statement (most of a big cancel: a round trip
        # a batch, not a job), then the others as `cancel` would, one by one.
        ended = tx.run_each("cancel_queued_jobs", _each(ids), {"now": tx.now})
        if ended:
            count_endings(tx, ended)
            settle(tx, ended)
        done = {row["id"] for row in ended}
        rest = (job_id for job_id in sorted(ids) if job_id not in done)
        return len(done) + sum(jobs.cancel_in(tx, job_id) for job_id in rest)


@retried_on_conflict
def _retry_batch(db: Backend, ids: Sequence[int], run_now: bool) -> int:
    if not ids:
        return 0
    try:
        with db.transaction() as tx:
            lock_parents(tx, ids)
            # The jobs with no key, parent or workflow in one statement (most of
            # a big retry), then the others as `retry` would, one by one.
            params = {"run_now": run_now, "now": tx.now}
            done = {row["id"] for row in tx.run_each("retry_plain_jobs", _each(ids), params)}
            rest = (job_id for job_id in sorted(ids) if job_id not in done)
            return len(done) + sum(_retried(tx, job_id, run_now) for job_id in rest)
    except DuplicateError:
        # A key taken in a race (as retry's): this batch again, one job at a
        # time, each refused or retried as `app.retry` would.
        return sum(_retried_alone(db, job_id, run_now) for job_id in sorted(ids))


def _each(ids: Sequence[int]) -> list[dict[str, int]]:
    """A batch's ids as `run_each` takes them, in id order (the lock order)."""
    return [{"id": job_id} for job_id in sorted(ids)]


def _retried(tx: Transaction, job_id: int, run_now: bool) -> bool:
    try:
        return steps.carry_out(tx, steps.retry_steps(job_id, run_now, tx.now)) is not None
    except InvalidStateError:
        return False  # its key is held by another live job: refused before any write


def _retried_alone(db: Backend, job_id: int, run_now: bool) -> bool:
    try:
        jobs.retry(db, job_id, run_now)
    except InvalidStateError:
        return False
    return True
