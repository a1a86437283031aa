"""Settings of the Django benchmark's project (bench/django_bench.py): one
database, SQLite or PostgreSQL, from DUE_DJANGO_BENCH_DB (a file path or
postgres:<name>), with due as the task backend."""

import os

SECRET_KEY = "benchmark-only"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "due.contrib.django", "benchjobs"]

_db = os.environ.get("DUE_DJANGO_BENCH_DB", "bench.sqlite3")
if _db.startswith("postgres:"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _db.removeprefix("postgres:"),
            "HOST": "127.0.0.1",
            "PORT": "5432",
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _db,
            "OPTIONS": {"transaction_mode": "IMMEDIATE"},
        }
    }

TASKS = {
    "default": {
        "BACKEND": "due.contrib.django.DueBackend",
        "QUEUES": ["default", "plain"],
        "OPTIONS": {"DATABASE": "default"},
    }
}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
if os.environ.get("DUE_DJANGO_BENCH_QUIET_TASKS"):
    # Django's own receivers of its task signals log two INFO lines a task.
    LOGGING["loggers"] = {"django.tasks": {"level": "WARNING"}}
