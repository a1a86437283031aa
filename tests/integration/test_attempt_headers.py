"""What an attempt hook keeps with a failed attempt's entry is read back with the
job (`Job.errors[i].headers`): an integration finds its first attempt's there."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import due
from due.clock import FakeClock
from due.instrumentation import AttemptEnd, AttemptInfo, add_attempt_hook, remove_attempt_hook
from due.testing import drain


class Keeps:
    def __init__(self, info: AttemptInfo) -> None:
        self.attempt = info.attempt

    def running(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()

    def ended(self, end: AttemptEnd) -> Mapping[str, str] | None:
        return {"kept-by": f"attempt {self.attempt}"}


def test_a_hook_s_headers_come_back_with_each_failed_attempt_s_entry(
    app: due.App, clock: FakeClock
) -> None:
    @app.task(name="fails_twice", retry=due.Retry(max_attempts=3, backoff=1, jitter=0))
    def fails_twice(ctx: due.Context) -> str:
        if ctx.attempt < 3:
            raise ValueError("not yet")
        return "done"

    job = fails_twice.enqueue()
    with hooked(Keeps):
        for _ in range(3):
            drain(app)
            clock.advance("1m")
    stored = app.get(job.id)
    assert stored.state == due.JobState.SUCCEEDED
    assert [error.headers for error in stored.errors] == [
        {"kept-by": "attempt 1"},
        {"kept-by": "attempt 2"},
    ]
    unhooked = fails_twice.enqueue()
    drain(app)
    assert [error.headers for error in app.get(unhooked.id).errors] == [None]


@contextlib.contextmanager
def hooked(observer: type[Keeps]) -> Iterator[None]:
    add_attempt_hook(observer)
    try:
        yield
    finally:
        remove_attempt_hook(observer)
