"""Structured log events: a stable event name plus the ids, never only prose.

    event(logger, "job.failed", job=12, task="emails.send", attempt=2, error="...")

logs `job.failed job=12 task=emails.send attempt=2 error=...` and attaches the
fields to the record (`record.event`, `record.fields`) for JSON formatters.
"""

from __future__ import annotations

import json
import logging
from typing import Any

DRIVER_POOL_LOGGER = "psycopg.pool"


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    if not logger.isEnabledFor(level):
        return
    text = " ".join(f"{key}={_short(value)}" for key, value in fields.items())
    logger.log(level, "%s %s", name, text, extra={"event": name, "fields": fields})


def quiet_driver_pool() -> None:
    """Leave the failures of due's database connections to due's own messages.

    psycopg's pool logs each connection attempt that fails ("error connecting
    in 'due': ...") as a WARNING of the `psycopg.pool` logger, from its own
    thread; due reports the same failure as the command's error, or as the
    worker's event, naming the database and what to do. The `due` command
    calls this before it opens a database, so that only due's is printed. A
    level already given to that logger is kept, and the app's module, imported
    later, may give one (WARNING brings psycopg's lines back)."""
    pool = logging.getLogger(DRIVER_POOL_LOGGER)
    if pool.level == logging.NOTSET:
        pool.setLevel(logging.ERROR)


def _short(value: Any) -> str:
    text = str(value)
    if " " in text or not text:
        text = json.dumps(text)
    return text if len(text) <= 300 else text[:297] + "..."


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (and `ts`, Unix seconds), level, event, and the
    event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": self.formatTime(record),
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        else:
            data["message"] = record.getMessage()
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)
