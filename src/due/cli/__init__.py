"""The `due` command: one module per group of commands, registered on import."""

from due.cli import dashboard, jobs, limits, monitoring, queues, schedules, workers, workflows
from due.cli.main import main

__all__ = [
    "dashboard",
    "jobs",
    "limits",
    "main",
    "monitoring",
    "queues",
    "schedules",
    "workers",
    "workflows",
]
