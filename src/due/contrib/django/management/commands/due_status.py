"""`manage.py due_status`: `due status` on the project's App."""

from __future__ import annotations

from due.contrib.django.commands import DueCommand


class Command(DueCommand):
    help = "Show queues, jobs and workers: the options of `due status`."
    due_command = ("status",)
