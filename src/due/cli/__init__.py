"""The `due` command: one module per group of commands, registered on import."""

from due.cli import dashboard, jobs, monitoring, queues, schedules, workers
from due.cli.main import main

__all__ = ["dashboard", "jobs", "main", "monitoring", "queues", "schedules", "workers"]
