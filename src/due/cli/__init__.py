"""The `due` command: one module per group of commands, registered on import."""

from due.cli import jobs, monitoring, queues, schedules, workers
from due.cli.main import main

__all__ = ["jobs", "main", "monitoring", "queues", "schedules", "workers"]
