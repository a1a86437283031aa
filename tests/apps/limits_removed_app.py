"""The limits app's code after a release that took the limit "api" out: its
task `call_api` names no limit, and the app declares none (a worker of it
never claims a job that counts against a limit)."""

from __future__ import annotations

import due
from tests.apps.limits_app import timed

app = due.App()  # DUE_DATABASE_URL


@app.task(name="call_api")
def call_api(ctx: due.Context) -> int:
    return timed(ctx, "api", 0.0)
