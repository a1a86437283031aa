"""The task names the database knows without the app, on both backends: what
`due jobs --task` and the dashboard check a name that matched nothing against."""

from __future__ import annotations

import due
from due.core.records import WorkerRegistration
from due.job_filters import unknown_task


def test_schedules_workers_and_stored_jobs_name_the_tasks_they_hold(app: due.App) -> None:
    @app.task(name="billing.charge")
    def charge() -> None: ...

    @app.task(name="billing.report")
    def report() -> None: ...

    assert app.store.task_names() == [] and not app.store.task_in_use("billing.charge")
    charge.enqueue()
    app.add_schedule("nightly", every="1d", task=report)
    app.store.worker_register(WorkerRegistration("w:1:a", "w", 1, {"emails": 1}, ["emails.send"]))
    assert app.store.task_names() == ["billing.charge", "billing.report", "emails.send"]
    for name in app.store.task_names():
        assert app.store.task_in_use(name), name
    assert not app.store.task_in_use("billing") and not app.store.task_in_use("emails.sen")


def test_an_unknown_task_is_told_with_the_closest_from_the_app_and_the_database(
    app: due.App, backend_url: str
) -> None:
    @app.task(name="myapp.send_welcome")
    def send_welcome() -> None: ...

    send_welcome.enqueue()
    assert unknown_task(app, "myapp.send_welcome") is None and unknown_task(app, None) is None
    said = unknown_task(app, "send_welcome") or ""
    assert said.startswith("no task named 'send_welcome' is known (not a task of this app")
    assert said.endswith("did you mean 'myapp.send_welcome'?")
    bare = due.App(backend_url)  # the command without --app: the database alone
    try:
        assert unknown_task(bare, "myapp.send_welcome") is None  # a job of it is stored
        assert "did you mean 'myapp.send_welcome'?" in (unknown_task(bare, "myapp.welcome") or "")
        assert "known tasks: myapp.send_welcome" in (unknown_task(bare, "report") or "")
        assert "a\\x00" in (unknown_task(bare, "a\x00") or "")  # no database read can hold it
    finally:
        bare.close()
