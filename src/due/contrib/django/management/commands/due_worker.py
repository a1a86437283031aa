"""`manage.py due_worker`: `due worker` on the project's App (its options, the
scheduler on by default); without -q it serves the backend's QUEUES."""

from __future__ import annotations

from due.contrib.django.commands import DueCommand, with_backend_queues


class Command(DueCommand):
    help = "Run due jobs (and the scheduler): the options of `due worker`."
    due_command = ("worker",)

    def arguments(self, given: list[str]) -> list[str]:
        return with_backend_queues(given)
