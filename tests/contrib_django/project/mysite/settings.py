"""A Django project as a user writes one, with due as its task backend.

The tests point it at their databases through the environment: DUE_TEST_SQLITE
(a file) and DUE_TEST_POSTGRES (a database name on 127.0.0.1). Two databases
and two task backends, so one process tests both stores: "default" keeps its
jobs in the SQLite database, "pg" in the PostgreSQL one.
"""

import os

SECRET_KEY = "tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "due.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "mysite.urls"
TEST_RUNNER = "due.contrib.django.testing.DueTestRunner"
LOGIN_URL = "/accounts/login/"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DUE_TEST_SQLITE", "db.sqlite3"),
        # A transaction that will write takes the write lock at BEGIN: without
        # it, SQLite refuses a write in a transaction that read before another
        # connection committed (Django's advice for concurrent writers).
        "OPTIONS": {"transaction_mode": "IMMEDIATE"},
        # Django's test runner makes a test database: a file, as due's workers need.
        "TEST": {"NAME": os.environ.get("DUE_TEST_SQLITE", "db.sqlite3") + ".test"},
    },
    "pg": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("DUE_TEST_POSTGRES", "due_django"),
        "HOST": "127.0.0.1",
        "PORT": "5432",
    },
}
DATABASE_ROUTERS = ["mysite.routers.ShopEverywhere"]

TASKS = {
    "default": {
        "BACKEND": "due.contrib.django.DueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"DATABASE": "default"},
    },
    "pg": {
        "BACKEND": "due.contrib.django.DueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"DATABASE": "pg"},
    },
    # Django's own, beside due's: a project may have both.
    "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
}

DUE = {
    "BACKEND": os.environ.get("DUE_TEST_BACKEND", "default"),
    "LIMITS": {"mail-server": {"concurrency": 5}},
    "SCHEDULES": {
        "tidy-up": {"task": "shop.tasks.tidy_up", "every": "1h"},
    },
}
