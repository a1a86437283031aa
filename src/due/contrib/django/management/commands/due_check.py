"""`manage.py due_check`: `due check` on the project's App (its exit codes:
0 ok, 1 warning, 2 critical, 3 unknown)."""

from __future__ import annotations

from due.contrib.django.commands import DueCommand


class Command(DueCommand):
    help = "Check for alerts and exit 0, 1, 2 or 3: the options of `due check`."
    due_command = ("check",)
