"""The context a handler receives when it declares a parameter of type `due.Context`.

It carries what the attempt knows about itself, and the tools of long work:

- `checkpoint(value)` saves a JSON cursor durably on the job, fenced by the
  lease; a retry or a rescue starts with `checkpoint_value` set to it.
- `progress(done, total, message)` is kept in memory and written with the
  next heartbeat (cheap enough to call on every row).
- `raise_if_cancelled()`, `checkpoint` and `progress` are the safe points where
  a requested cancellation ends the job: they raise `JobCancelled`, so the
  handler's `finally` blocks run and the job ends `cancelled`, not retried.
- `spawn(task, items)` creates pieces under this job, which then waits for them.
- `transaction()` gives the job's own database transaction: writes made in it
  commit together with the job's success, or not at all.

Sync or async, the same calls: in an `async def` handler, `checkpoint` and
`spawn` return awaitables (`await ctx.checkpoint(cursor)`); in a plain
function they block until done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from due.core.jobs import JobState
from due.core.records import PieceSpawn
from due.errors import ConfigurationError, JobCancelled, LeaseLost
from due.long_work.pieces import check_policy
from due.payload import encode_value, finite_number, storable_text
from due.store.sqlalchemy_connections import in_autocommit, is_async, is_sqlalchemy, run_sync

if TYPE_CHECKING:
    from due.app import App
    from due.core.records import ClaimedJob
    from due.request import JobRequest
    from due.task import Task

MAX_PROGRESS_MESSAGE = 1000


class Context:
    """What a running attempt knows about itself, and what it can do about it.

    A handler gets one when it declares a first parameter annotated
    `due.Context`; the worker makes it, never your code. For example::

        @app.task(lease="15s", stuck_after="5m")
        def backfill(ctx: due.Context, table: str) -> None:
            cursor = ctx.checkpoint_value or 0
            for batch in batches(table, after=cursor):
                write(batch)                      # idempotent piece of work
                cursor = batch[-1].id
                ctx.checkpoint(cursor)            # durable; a retry resumes here
                ctx.progress(cursor, total)       # rides on the next heartbeat

    In an `async def` handler, `checkpoint` and `spawn` return awaitables
    (`await ctx.checkpoint(cursor)`); in a plain function they block until done.
    """

    def __init__(
        self,
        *,
        job_id: int,
        task: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        lease_token: int,
        scheduled_for: datetime | None = None,
        run_at: datetime | None = None,
        checkpoint_value: Any = None,
        has_pieces: bool = False,
        logger: logging.Logger | None = None,
        app: App | None = None,
        enqueued_at: datetime | None = None,
        worker: str | None = None,
    ) -> None:
        self.job_id = job_id
        """The job's id."""
        self.task = task
        """The name of its task."""
        self.queue = queue
        """The queue it runs in."""
        self.attempt = attempt
        """This attempt's number, from 1."""
        self.max_attempts = max_attempts
        """How many attempts the job may have in all."""
        self.lease_token = lease_token
        """The fencing token of this attempt's lease (every write about the job names it)."""
        self.scheduled_for = scheduled_for
        """For a run of a schedule, the time it runs for (key its work on this)."""
        self.run_at = run_at
        """When this attempt became due (a retry's backoff included)."""
        self.checkpoint_value = checkpoint_value
        """The last value saved with `checkpoint` (by this or an earlier attempt)."""
        self.has_pieces = has_pieces
        """An earlier attempt spawned pieces (this one will wait for them too)."""
        self.enqueued_at = enqueued_at
        """When the job was enqueued."""
        self.worker = worker
        """The id of the worker running this attempt (None outside a worker)."""
        self.logger = logger or logging.getLogger(f"due.job.{task}")
        """A logger named after the task (`due.job.<task>`)."""
        self._app = app
        self.cancel_requested = False
        self.lease_lost = False
        self.stop_reason = "lost its lease"
        """Why a stopped attempt stops (it may write nothing more either way)."""
        self.trusted: Callable[[], bool] | None = None
        """Whether its worker still trusts its lease (set by the worker).

        Safe points ask it themselves, so a paused process that wakes up past
        the deadline stops at once, before the worker's loop has had a turn to
        say so.
        """
        self.last_progress: dict[str, Any] | None = None
        self.progress_dirty = False
        self.pieces_spawned = 0
        self.completed_in_transaction = False
        self._upstream_rows: dict[str, tuple[JobState, Any]] | None = None
        self.steps_added = 0

    @classmethod
    def for_job(
        cls, job: ClaimedJob, app: App | None = None, *, worker: str | None = None
    ) -> Context:
        """The context of a claimed job's attempt (made by the worker)."""
        return cls(
            job_id=job.id,
            task=job.task,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            lease_token=job.lease_token,
            scheduled_for=job.scheduled_for,
            run_at=job.run_at,
            checkpoint_value=job.checkpoint,
            has_pieces=job.has_pieces,
            app=app,
            enqueued_at=job.created_at,
            worker=worker,
        )

    @property
    def upstream(self) -> dict[str, Any]:
        """The results of the steps this step of a workflow comes after.

        By step name, as stored (None for a step that did not succeed). Read
        once, at first use: they had all ended before this step was released.
        """
        return {name: result for name, (_, result) in self._upstream().items()}

    @property
    def upstream_states(self) -> dict[str, JobState]:
        """How each step this step of a workflow comes after ended.

        By step name: what a step with `on_upstream_failure="run"` looks at.
        """
        return {name: state for name, (state, _) in self._upstream().items()}

    @property
    def workflow(self) -> RunningWorkflow:
        """The workflow of this step, to add steps to at run time.

        `ctx.workflow.add(task.request(...), name=..., after=[...])`.
        """
        return RunningWorkflow(self)

    def _upstream(self) -> dict[str, tuple[JobState, Any]]:
        if self._upstream_rows is None:
            rows = self._store().job_upstream(self.job_id)
            self._upstream_rows = {
                row["step_name"]: (JobState(row["state"]), row["result"]) for row in rows
            }
        return self._upstream_rows

    @property
    def is_last_attempt(self) -> bool:
        """Whether a failure of this attempt fails the job for good (no attempt is left)."""
        return self.attempt >= self.max_attempts

    # --- cancellation --------------------------------------------------------

    def stop_writing(self, reason: str) -> None:
        """Say this attempt is over (its lease lost, or it ran past its timeout).

        It stops at its next safe point, and its checkpoints and transactions
        are refused from now on, before they write.
        """
        self.stop_reason = reason
        self.lease_lost = True

    @property
    def cancelled(self) -> bool:
        """Whether someone asked this job to stop (it should, at its next safe point)."""
        return self.cancel_requested

    def raise_if_cancelled(self) -> None:
        """A safe point: stop here if the job must stop.

        Raises:
            JobCancelled: Someone asked the job to stop: let it propagate, and
                the job ends `cancelled` (your `finally` blocks run).
            LeaseLost: This worker no longer holds the job's lease (another
                attempt may run it): let it propagate, and write nothing more.
        """
        if not self.lease_lost and self.trusted is not None and not self.trusted():
            self.stop_writing("could not renew its lease in time")
        if self.lease_lost:
            raise LeaseLost(f"job {self.job_id} {self.stop_reason}: stop without writing")
        if self.cancel_requested:
            raise JobCancelled(f"job {self.job_id} was cancelled")

    # --- progress ------------------------------------------------------------

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Record progress (in memory; the next heartbeat writes it). A safe point.

        Cheap enough to call on every row: `due status` draws it as a bar, and
        a task's `stuck_after` flags a job whose progress stops moving.

        Args:
            done: How much is done: a number (a Decimal or a numpy number is
                converted).
            total: How much there is in all, when known.
            message: A few words on what it is doing (at most 1,000 characters
                are kept).

        Raises:
            PayloadError: `done` or `total` is NaN, infinite or not a number:
                raised here, for this job alone, rather than fail a heartbeat that
                renews other jobs' leases too.
            JobCancelled: The job was asked to stop (see `raise_if_cancelled`).
            LeaseLost: The job's lease was lost (see `raise_if_cancelled`).
        """
        what = f"progress of job {self.job_id}"
        report: dict[str, Any] = {"done": finite_number(done, f"{what}: done")}
        if total is not None:
            report["total"] = finite_number(total, f"{what}: total")
        if message is not None:
            report["message"] = storable_text(str(message), MAX_PROGRESS_MESSAGE)
        if report != self.last_progress:
            self.last_progress = report
            self.progress_dirty = True
        self.raise_if_cancelled()

    def progress_json(self) -> str | None:
        """The last progress as the JSON a heartbeat writes, or None."""
        if self.last_progress is None:
            return None
        return encode_value(self.last_progress, f"progress of job {self.job_id}")

    # --- checkpoints -----------------------------------------------------------

    def checkpoint(self, value: Any, *, connection: Any = None) -> Awaitable[None] | None:
        """Save a value durably on the job; a retry resumes from it. A safe point.

        Blocks in a sync handler; returns an awaitable in an async one. The
        next attempt (a retry, or a rescue after this worker died) starts with
        `checkpoint_value` set to the last value saved.

        With `connection=` (your own psycopg or sqlite3 connection to the job
        database, in an open transaction), the checkpoint is written in your
        transaction: the rows you write and the cursor that says they are done
        commit together, so a retry resumes exactly after them and no row is
        written twice. A cancel request is then kept for the next safe point
        rather than raised inside your transaction.

        Args:
            value: What to save: any JSON value (a cursor, an id, a dict).
            connection: Your own open connection to the job database, to
                checkpoint inside your transaction (a psycopg `AsyncConnection`
                in an async handler).

        Returns:
            None in a sync handler; an awaitable in an async one.

        Raises:
            PayloadError: `value` cannot be stored as JSON.
            JobCancelled: The job was asked to stop (not raised with
                `connection=`).
            LeaseLost: The job's lease was lost: nothing was saved (with
                `connection=`, let it roll your transaction back).
        """
        text = encode_value(value, f"checkpoint of job {self.job_id}")
        if connection is not None:
            return self._checkpoint_on(value, text, connection)
        if _on_event_loop():
            return self._checkpoint_async(value, text)
        self._checkpoint(value, text)
        return None

    async def _checkpoint_async(self, value: Any, text: str) -> None:
        await asyncio.to_thread(self._checkpoint, value, text)

    def _checkpoint_on(self, value: Any, text: str, connection: Any) -> Awaitable[None] | None:
        if self.lease_lost:  # (a cancel request waits for the next safe point)
            raise LeaseLost(f"job {self.job_id} {self.stop_reason}: roll back and stop")
        store = self._store()
        if _on_event_loop():
            return self._checkpoint_on_async(value, text, connection)
        # The caller's connection belongs to the caller's thread: use it right here.
        self._checkpoint_saved(value, store.checkpoint_save(*self._fence(text), connection))
        return None

    async def _checkpoint_on_async(self, value: Any, text: str, connection: Any) -> None:
        store = self._store()
        if _is_async_connection(connection):
            reply = await store.checkpoint_save_async(*self._fence(text), connection)
        else:
            reply = store.checkpoint_save(*self._fence(text), connection)
        self._checkpoint_saved(value, reply)

    def _fence(self, text: str) -> tuple[int, int, str]:
        return self.job_id, self.lease_token, text

    def _checkpoint_saved(self, value: Any, reply: bool | None) -> None:
        if reply is None:
            self.lease_lost = True
            raise LeaseLost(f"job {self.job_id} lost its lease: roll back and stop")
        self.cancel_requested = self.cancel_requested or reply
        self.checkpoint_value = value

    def _checkpoint(self, value: Any, text: str) -> None:
        self.raise_if_cancelled()
        reply = self._store().checkpoint_save(self.job_id, self.lease_token, text)
        if reply is None:
            self.lease_lost = True
        elif reply:
            self.cancel_requested = True
        if reply is not None:
            self.checkpoint_value = value
        self.raise_if_cancelled()

    # --- pieces ------------------------------------------------------------------

    def spawn(
        self,
        task: Task[Any, Any] | str,
        items: Iterable[tuple[Any, ...] | list[Any] | JobRequest],
        *,
        on_complete: Task[Any, Any] | str | None = None,
        on_piece_failure: str | None = None,
    ) -> Awaitable[int] | int:
        """Create pieces of this job, which then waits for them, holding no worker slot.

        When the last piece ends, `on_complete` runs once with a summary
        `{"parent", "pieces", "succeeded", "failed"}`; without it the job simply
        succeeds. A later call keeps the completion and policy of an earlier one.

        A piece is known by its task and arguments: spawning the same item again
        (a retried attempt, or one resumed from a checkpoint) adds nothing, so
        spawn from a checkpoint freely.

        Args:
            task: The pieces' task (or its name).
            items: One per piece: its positional arguments (a tuple or list), or
                a `task.request(...)`.
            on_complete: A task (or its name) to run once with the summary when
                the last piece ends.
            on_piece_failure: `"fail"` fails this job at the first failed piece
                and cancels the rest; `"continue"` (the default) counts and
                reports failures.

        Returns:
            How many pieces were new; an awaitable of it in an async handler.

        Raises:
            InvalidJobError: An item does not fit the task (all are refused).
            ConfigurationError: An unknown `on_piece_failure`, or a context not
                attached to a running job.
            JobCancelled: The job was asked to stop.
            LeaseLost: The job's lease was lost: no piece was added.
        """
        app = self._require_app()
        pieces = app.piece_jobs(task, items)
        spec = app.completion_spec(on_complete) if on_complete is not None else None
        check_policy(on_piece_failure)
        self.pieces_spawned += len(pieces)
        request = PieceSpawn(self.job_id, self.lease_token, pieces, spec, on_piece_failure)
        if _on_event_loop():
            return self._spawn_async(request)
        return self._spawn(request)

    async def _spawn_async(self, request: PieceSpawn) -> int:
        return await asyncio.to_thread(self._spawn, request)

    def _spawn(self, request: PieceSpawn) -> int:
        self.raise_if_cancelled()
        try:
            added = self._store().piece_spawn(request)
        except JobCancelled:  # asked to stop, as the store read it: nothing was added
            self.cancel_requested = True
            raise
        if added is None:
            self.lease_lost = True
            self.raise_if_cancelled()
        return int(added or 0)

    # --- the job's own transaction ------------------------------------------------

    def transaction(self, connection: Any = None) -> JobTransaction:
        """A transaction that also records the job's success.

        The transaction is fenced by the job's lease: your writes and the job's
        success commit together or not at all, and a rescued or duplicate
        attempt cannot commit them twice. The job has succeeded once the block
        exits. Keep it short (on SQLite it holds the one write lock)::

            with ctx.transaction() as conn:
                conn.execute("INSERT INTO invoices ...", ...)

        Without `connection`, the transaction is on due's own connection, given
        to the block (sync handlers). With `connection` (your own open
        connection to the job database: SQLAlchemy's Connection or Session,
        or psycopg's or sqlite3's; in an async handler SQLAlchemy's
        AsyncConnection or AsyncSession, with `async with`), the block works in
        your transaction, and at its end the job's success is written in it
        and it is committed; an error in the block rolls it back::

            with ctx.transaction(session):
                session.add(Invoice(...))

        Not for a job with pieces: it ends when they do (use `on_complete`).

        Args:
            connection: Your own open connection to the job database, whose
                transaction the block works in and the job's success commits
                with (default: a transaction on due's own connection).

        Returns:
            A context manager (`with`; `async with` for SQLAlchemy's async
            objects) whose block works on a connection: due's own (sqlite3,
            or psycopg) in the open transaction, or the `connection` given.

        Raises:
            JobCancelled: The job was asked to stop before the commit: nothing
                is committed and it ends cancelled.
            LeaseLost: The job's lease was lost: nothing is committed.
            ConfigurationError: The job has pieces.
        """
        return JobTransaction(self, connection)

    def _may_complete_in_transaction(self) -> None:
        self.raise_if_cancelled()
        if self.pieces_spawned or self.has_pieces:
            raise ConfigurationError(
                f"job {self.job_id} has pieces: it ends when they do, not in its own "
                "transaction; commit in the pieces, or in an on_complete task"
            )

    @contextmanager
    def _own_transaction(self) -> Iterator[Any]:
        self._may_complete_in_transaction()
        with self._store().job_transaction(
            self.job_id, self.lease_token, self.progress_json()
        ) as connection:
            yield connection
        self.completed_in_transaction = True

    @contextmanager
    def _callers_transaction(self, connection: Any) -> Iterator[Any]:
        self._may_complete_in_transaction()
        _refuse_autocommit(in_autocommit(connection, "ctx.transaction(connection)"))
        try:
            yield connection
            self._store().job_complete_on(
                self.job_id, self.lease_token, self.progress_json(), connection
            )
        except BaseException:
            connection.rollback()
            raise
        connection.commit()
        self.completed_in_transaction = True

    async def _callers_transaction_async(self, connection: Any, failed: bool) -> None:
        """The end of `async with ctx.transaction(conn)`.

        The success written and committed, or (`failed`) everything rolled back.
        """
        if not failed:
            try:
                await run_sync(
                    connection,
                    "ctx.transaction(connection)",
                    lambda lent: self._store().job_complete_on(
                        self.job_id, self.lease_token, self.progress_json(), lent
                    ),
                )
            except BaseException:
                await connection.rollback()
                raise
            await connection.commit()
            self.completed_in_transaction = True
        else:
            await connection.rollback()

    # --- plumbing ------------------------------------------------------------------

    def _require_app(self) -> App:
        if self._app is None:
            raise ConfigurationError("this context is not attached to a running job")
        return self._app

    def _store(self) -> Any:
        return self._require_app().store

    def __repr__(self) -> str:
        return (
            f"Context(job_id={self.job_id}, task={self.task!r}, attempt={self.attempt}/"
            f"{self.max_attempts}, lease_token={self.lease_token})"
        )


class JobTransaction:
    """What `ctx.transaction(...)` gives.

    `with` it in a sync handler; `async with` it, on SQLAlchemy's
    AsyncConnection or AsyncSession, in an async one.
    """

    def __init__(self, context: Context, connection: Any) -> None:
        self._context = context
        self._connection = connection
        self._sync: AbstractContextManager[Any] | None = None

    def __enter__(self) -> Any:
        if is_async(self._connection):
            raise ConfigurationError(
                "ctx.transaction() got SQLAlchemy's async connection: use "
                "`async with ctx.transaction(conn):` in an async handler"
            )
        context = self._context
        if self._connection is None:
            self._sync = context._own_transaction()
        else:
            self._sync = context._callers_transaction(self._connection)
        return self._sync.__enter__()

    def __exit__(self, *exc_info: Any) -> bool | None:
        assert self._sync is not None
        return self._sync.__exit__(*exc_info)

    async def __aenter__(self) -> Any:
        if not is_async(self._connection):
            raise ConfigurationError(
                "`async with ctx.transaction(conn)` takes SQLAlchemy's AsyncConnection or "
                "AsyncSession; without one, use `with ctx.transaction() as conn:` in a sync "
                "handler"
            )
        self._context._may_complete_in_transaction()
        call = "ctx.transaction(connection)"
        _refuse_autocommit(
            await run_sync(self._connection, call, lambda lent: in_autocommit(lent, call))
        )
        return self._connection

    async def __aexit__(self, kind: type[BaseException] | None, *rest: Any) -> None:
        await self._context._callers_transaction_async(self._connection, failed=kind is not None)


def _refuse_autocommit(autocommits: bool) -> None:
    if autocommits:
        raise ConfigurationError(
            "ctx.transaction(connection) got a connection in autocommit: each statement "
            "commits on its own, so the job's success cannot commit with your writes; "
            "pass one in a transaction (SQLAlchemy's default isolation level, psycopg's "
            "autocommit=False, sqlite3's default isolation_level)"
        )


def _is_async_connection(connection: Any) -> bool:
    """Whether it is psycopg's AsyncConnection, or SQLAlchemy's async ones."""
    if is_sqlalchemy(connection):
        return is_async(connection)
    return hasattr(connection, "__aenter__") and hasattr(connection, "cursor")


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class RunningWorkflow:
    """The workflow of a running step (`ctx.workflow`)."""

    def __init__(self, context: Context) -> None:
        self._context = context

    def add(
        self,
        request: JobRequest,
        *,
        name: str | None = None,
        after: Iterable[str] = (),
        on_upstream_failure: str = "cancel",
    ) -> int:
        """Add a step to this step's workflow, now.

        It may come after steps that exist, by name (a step it comes after that
        has already ended counts as ended). Added again under the same name (a
        retried or resumed attempt), nothing is added: the step's id is given
        back, so add from a checkpoint freely.

        Args:
            request: The job, as `task.request(...)` makes it.
            name: Its name in the workflow (default: this step's name, a slash
                and the count of steps this attempt added, from 1).
            after: Names of steps of the workflow that it comes after.
            on_upstream_failure: "cancel" (the default) or "run", as `flow.add`.

        Returns:
            The new step's job id.

        Raises:
            ConfigurationError: Not a step of a workflow, a name in `after` that
                no step has, or a bad policy.
            InvalidJobError: The request is refused (nothing is added).
            JobCancelled: This step was asked to stop (its workflow cancelled,
                say): nothing is added.
            LeaseLost: This attempt's lease was lost: nothing is added.
        """
        from due.core.records import StepRequest
        from due.workflows import POLICIES, check_step_name

        context = self._context
        app = context._require_app()
        if on_upstream_failure not in POLICIES:
            raise ConfigurationError(
                f"on_upstream_failure must be 'cancel' or 'run', got {on_upstream_failure!r}"
            )
        context.steps_added += 1
        own = app.get(context.job_id)
        if own.workflow_id is None:
            raise ConfigurationError(
                f"job {context.job_id} is not a step of a workflow: ctx.workflow.add "
                "adds steps to the workflow of the step that runs"
            )
        step_name = name if name is not None else f"{own.step_name}/{context.steps_added}"
        check_step_name(step_name)
        names = tuple(after)
        if not all(isinstance(other, str) for other in names):
            raise ConfigurationError(f"after= takes the names of steps, got {names!r}")
        (job,) = app._prepare([request])
        step = StepRequest(job, step_name, (), on_upstream_failure, names)
        context.raise_if_cancelled()
        try:
            added = context._store().workflow_add(context.job_id, context.lease_token, [step])
        except JobCancelled:  # asked to stop, as the store read it: nothing was added
            context.cancel_requested = True
            raise
        if added is None:
            context.lease_lost = True
            context.raise_if_cancelled()
            raise LeaseLost(f"job {context.job_id} {context.stop_reason}: no step was added")
        return int(added[0])
