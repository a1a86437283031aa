"""The dashboard as an ASGI app: pages rendered on the server, refreshed in place
by htmx (the live part of a page is fetched again and swapped), actions as
POSTs that redirect back.

Everything goes through the `App` (and the visibility snapshot): the dashboard
holds no state of its own but a CSRF cookie per browser.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from due import job_filters
from due.core.jobs import JobState
from due.core.limits import shown_key
from due.core.schedules import schedule_problem
from due.errors import DueError, JobNotFoundError, ScheduleNotFoundError
from due.shown_arguments import shown_arguments
from due.visibility.alerts import evaluate
from due.visibility.limits import limit_wait
from due.visibility.metrics import registry_for
from due.visibility.schedule_health import expected_runs
from due.visibility.snapshot import WORKERS_SHOWN, take
from due.web import bulk, views
from due.web.forms import local_path, read_form, typed_job_id, who
from due.web.job_search import PageFilter
from due.web.security import (
    CSRF_FIELD,
    Credential,
    Guard,
    csrf_ok,
    csrf_token,
    host_csrf,
    set_session_cookie,
)

if TYPE_CHECKING:
    from due.app import App

HERE = Path(__file__).parent
PAGE_SIZE = 50
STRIP_LENGTH = 30
MAX_STRIP_WINDOW = timedelta(days=31)
THROUGHPUT_MINUTES = 60
RECENT_ACTIONS = 10
"""The actions by hand the overview lists: a bulk action or a queue's pause is
shown nowhere else (a job's page and a schedule's row show only their own)."""


def create_dashboard(
    app: App,
    *,
    credential: Credential | None = None,
    allowed_hosts: frozenset[str] | None = None,
) -> Starlette:
    """The dashboard of `app`, to serve or to mount in your own ASGI app (behind
    your authentication, or with a `credential` of its own). `allowed_hosts`:
    the only Host headers answered (the CLI's loopback guard against DNS
    rebinding); None answers any."""
    pages = Pages(app, credential)
    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.jobs, name="jobs"),
        Route("/jobs/{job_id:int}", pages.job, name="job"),
        Route("/schedules", pages.schedules, name="schedules"),
        Route("/workers", pages.workers, name="workers"),
        Route("/workflows", pages.workflows, name="workflows"),
        Route("/workflows/{workflow_id:int}", pages.workflow, name="workflow"),
        Route("/metrics", pages.metrics, name="metrics"),
        Route("/login", pages.login, methods=["GET", "POST"], name="login"),
        Route("/jobs/{job_id:int}/{action}", pages.job_action, methods=["POST"]),
        Route("/jobs/all/{action}", pages.bulk_confirm, methods=["GET"]),
        Route("/jobs/all/{action}", pages.bulk_action, methods=["POST"]),
        # Queue and schedule names travel in the form, not the path: a name may hold
        # any character ("/", "..", "?"), and a path would be read differently.
        Route("/workflows/{workflow_id:int}/{action}", pages.workflow_action, methods=["POST"]),
        Route("/queues/{action}", pages.queue_action, methods=["POST"]),
        Route("/schedules/{action}", pages.schedule_action, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    guard = Middleware(
        Guard, credential=credential, allowed_hosts=allowed_hosts, now=app.clock.wall
    )
    return Starlette(routes=routes, middleware=[guard])


class Pages:
    def __init__(self, app: App, credential: Credential | None = None) -> None:
        self.app = app
        self.credential = credential
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.templates.filters.update(
            when=views.when, seconds=views.seconds, json=views.pretty_json, limit_key=shown_key
        )

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        base = request.scope.get("root_path", "")
        field, token = host_csrf(request) or (CSRF_FIELD, csrf_token(request))
        page = self.templates.get_template(name).render(
            request=request,
            base=base,
            csrf_field=field,
            csrf=token,
            here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            **context,
        )
        return HTMLResponse(page, status_code=status)

    # --- pages ----------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        snapshot = take(self.app)
        rules = self.app.alert_rules()
        throughput = self.app.store.stats_throughput(snapshot.at, THROUGHPUT_MINUTES)
        queues = []
        for queue in snapshot.queues:
            age = snapshot.oldest_due_age(queue)
            per_minute = throughput.get(queue.name, [0] * THROUGHPUT_MINUTES)
            queues.append(
                {
                    "queue": queue,
                    "age": age,
                    "level": views.age_level(age, rules.for_queue(queue.name)),
                    "workers": snapshot.live_workers.get(queue.name, 0),
                    "sparkline": views.sparkline(per_minute),
                    "last_hour": sum(per_minute),
                }
            )
        return self.render(
            request,
            "overview.html",
            alerts=evaluate(snapshot, rules),
            queues=queues,
            tasks=snapshot.tasks,
            limits=snapshot.limits,
            actions=self.app.history(limit=RECENT_ACTIONS)[::-1],
            now=snapshot.at,
        )

    def jobs(self, request: Request) -> Response:
        params = request.query_params
        shown = PageFilter.read(params)
        if typed_job_id(shown.search) is not None:
            try:
                job = self.app.get(int(shown.search))
            except JobNotFoundError:
                pass
            else:
                return RedirectResponse(f"{request.scope.get('root_path', '')}/jobs/{job.id}", 303)
        problem = shown.problem(self.app)
        if problem is not None:
            return self.jobs_page(request, shown, [], problem=problem, status=400)
        listed = self.app.jobs(
            **shown.options(),
            key=shown.search or None,
            before=typed_job_id(params.get("before")),
            limit=PAGE_SIZE + 1,
        )
        older = shown.query(before=listed[PAGE_SIZE - 1].id) if len(listed) > PAGE_SIZE else None
        unknown = None if listed else job_filters.unknown_task(self.app, shown.get("task"))
        return self.jobs_page(
            request,
            shown,
            listed[:PAGE_SIZE],
            older=older,
            offers=bulk.offers(self.app, shown),
            unknown_task=unknown,
        )

    def jobs_page(
        self,
        request: Request,
        shown: PageFilter,
        listed: list[Any],
        status: int = 200,
        **extra: Any,
    ) -> Response:
        return self.render(
            request,
            "jobs.html",
            status,
            jobs=listed,
            filters=shown.terms,
            search=shown.search,
            query=shown.query(),
            states=[s.value for s in JobState],
            queues=[queue.name for queue in self.app.queues()],
            now=self.app.store.now(),
            **extra,
        )

    def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            job = self.app.get(job_id)
        except JobNotFoundError:
            return self.render(request, "error.html", 404, message=f"no job {job_id}")
        pieces = self.app.jobs(parent=job.id, limit=200) if job.pieces is not None else []
        return self.render(
            request,
            "job.html",
            job=job,
            arguments=dict(zip(("args", "kwargs"), shown_arguments(job, self.app), strict=True)),
            pieces=pieces,
            limit_wait=limit_wait(self.app, job),
            history=self.app.history(job=job.id),
            now=self.app.store.now(),
        )

    def schedules(self, request: Request) -> Response:
        store = self.app.store
        now = store.now()
        rows = []
        for overview in self.app.schedules():  # read once, not once per schedule
            schedule = overview.stored.schedule
            problem = overview.stored.problem or schedule_problem(schedule, now)
            since = now - (MAX_STRIP_WINDOW if problem else _strip_window(schedule, now))
            recorded = store.schedule_runs_since(schedule.name, since)
            runs = expected_runs(overview.stored, recorded, since, now, overview.created_at)
            rows.append(
                {
                    "overview": overview,
                    "schedule": schedule,
                    "words": views.in_words(schedule),
                    "strip": runs[-STRIP_LENGTH:],
                    "problem": problem,
                    "history": self.app.history(schedule=schedule.name, limit=5),
                }
            )
        return self.render(request, "schedules.html", schedules=rows, now=now)

    def workers(self, request: Request) -> Response:
        store = self.app.store  # the workers and their jobs, not the whole snapshot
        return self.render(
            request,
            "workers.html",
            workers=store.worker_list(WORKERS_SHOWN),
            running=store.worker_running_counts(),
            now=store.now(),
        )

    def workflows(self, request: Request) -> Response:
        return self.render(
            request,
            "workflows.html",
            workflows=self.app.workflows(limit=PAGE_SIZE),
            now=self.app.store.now(),
        )

    def workflow(self, request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        try:
            status = self.app.workflow_status(workflow_id)
        except JobNotFoundError:
            return self.render(request, "error.html", 404, message=f"no workflow {workflow_id}")
        return self.render(
            request,
            "workflow.html",
            workflow=status,
            graph=views.workflow_graph(status),
            now=self.app.store.now(),
        )

    def metrics(self, request: Request) -> Response:
        return Response(generate_latest(registry_for(self.app)), media_type=CONTENT_TYPE_LATEST)

    async def login(self, request: Request) -> Response:
        target = local_path(request.query_params.get("next"), request)
        if request.method == "GET":
            return self.render(request, "login.html", target=target)
        form = await read_form(request)
        token = form.get("token", "")
        if self.credential is None or not self.credential.token_matches(token):
            return self.render(request, "login.html", 401, target=target, refused=True)
        response = RedirectResponse(target, status_code=303)
        set_session_cookie(response, request, self.credential.session(self.app.clock.wall()))
        return response

    def bulk_confirm(self, request: Request) -> Response:
        return bulk.confirmation(self, request)

    # --- actions --------------------------------------------------------------------

    async def bulk_action(self, request: Request) -> Response:
        return await bulk.carry_out(self, request)

    async def job_action(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        by = who(request)
        actions: dict[str, Callable[[], object]] = {
            "cancel": lambda: self.app.cancel(job_id, by=by),
            "retry": lambda: self.app.retry(job_id, by=by),
            "pause-pieces": lambda: self.app.pause_group(job_id, by=by),
            "resume-pieces": lambda: self.app.resume_group(job_id, by=by),
        }
        return await self.act(request, actions, f"/jobs/{job_id}")

    async def workflow_action(self, request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        by = who(request)
        actions: dict[str, Callable[[], object]] = {
            "cancel": lambda: self.app.cancel_workflow(workflow_id, by=by),
            "retry": lambda: self.app.retry_workflow(workflow_id, by=by),
        }
        return await self.act(request, actions, f"/workflows/{workflow_id}")

    async def queue_action(self, request: Request) -> Response:
        form = await read_form(request)
        name, by = form.get("name", ""), who(request)
        actions: dict[str, Callable[[], object]] = {
            "pause": lambda: self.app.pause_queue(name, force=True, by=by),
            "resume": lambda: self.app.resume_queue(name, force=True, by=by),
        }
        return await self.act(request, actions, "/", form)

    async def schedule_action(self, request: Request) -> Response:
        form = await read_form(request)
        name, by = form.get("name", ""), who(request)
        actions: dict[str, Callable[[], object]] = {
            "trigger": lambda: self.app.trigger_schedule(name, by=by),
            "pause": lambda: self.app.pause_schedule(name, by=by),
            "resume": lambda: self.app.resume_schedule(name, by=by),
        }
        return await self.act(request, actions, "/schedules", form)

    def refused(self, request: Request, form: dict[str, str]) -> Response | None:
        """The refusal of a form without this browser's CSRF token, or None."""
        if host_csrf(request) or csrf_ok(request, form.get(CSRF_FIELD)):
            return None
        return self.render(
            request,
            "error.html",
            403,
            message="this form has expired or did not come from this dashboard "
            "(no valid CSRF token); reload the page and try again",
        )

    async def act(
        self,
        request: Request,
        actions: dict[str, Callable[[], object]],
        back: str,
        form: dict[str, str] | None = None,
    ) -> Response:
        form = await read_form(request) if form is None else form
        refused = self.refused(request, form)
        if refused is not None:
            return refused
        action = actions.get(request.path_params["action"])
        if action is None:
            return self.render(request, "error.html", 404, message="no such action")
        try:
            await run_in_threadpool(action)
        except (JobNotFoundError, ScheduleNotFoundError) as error:
            return self.render(request, "error.html", 404, message=str(error))
        except DueError as error:
            return self.render(request, "error.html", 409, message=str(error))
        target = local_path(form.get("next"), request, default=back)
        return RedirectResponse(target, status_code=303)


def _strip_window(schedule: Any, now: datetime) -> timedelta:
    """Long enough to hold the last STRIP_LENGTH times of the schedule (its
    period from two consecutive times to come), a month at most."""
    every = schedule.timing.every
    if every is None:
        first, second = itertools.islice(schedule.timing.firings_after(now), 2)
        every = (second - first).total_seconds()
    return min(timedelta(seconds=every * (STRIP_LENGTH + 1)), MAX_STRIP_WINDOW)
