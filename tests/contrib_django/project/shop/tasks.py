"""Tasks as a Django user writes them (`django.tasks.task`), with due's options.

Django 6.1 hands @task's other keywords to the backend's task class (due's
options); Django 6.0 does not, and there `due.contrib.django.task` takes them.
"""

import sys

import django
from django.tasks import task

import due
from due.contrib.django import task as due_task
from shop.models import Signup

task_with_options = task if django.VERSION >= (6, 1) else due_task


@task_with_options(queue_name="emails", limits=["mail-server"])
def send_welcome_email(email):
    signed_up = any(
        Signup.objects.using(db).filter(email=email).exists() for db in ("default", "pg")
    )
    return {"sent_to": email, "signed_up": signed_up}


@task_with_options(retry=due.Retry(max_attempts=2, backoff=0.05, jitter=0))
def always_fails(reason):
    raise ValueError(reason)


@task(takes_context=True)
def knows_its_context(context, word):
    result = context.task_result
    return {"word": word, "attempt": context.attempt, "id": result.id, "backend": result.backend}


@task(priority=10)
async def add_async(a, b):
    return a + b


@task
def tidy_up():
    return "tidy"


def not_a_task_yet(n):
    """A plain function, for the tests that make tasks of it."""
    return n


def not_a_task_too(n):
    """Another, for the tests whose task is refused."""
    return n


@task
def returns_a_set():
    return {1, 2}  # JSON cannot hold it


@task_with_options(retry=due.Retry(max_attempts=2, backoff=0.05, jitter=0), takes_context=True)
def fails_once(context):
    """Fails its first attempt; the second says when the task started, as Django tells it."""
    if context.attempt == 1:
        raise ValueError("the first attempt fails")
    result = context.task_result
    return {
        "started_at": result.started_at.isoformat(),
        "last": result.last_attempted_at.isoformat(),
    }


@task
def echoes(*args, **kwargs):
    """Returns its arguments, as the task was given them."""
    return {"args": list(args), "kwargs": kwargs}


@task_with_options(retry=due.Retry(max_attempts=1))
def signs_in(user, password):
    raise PermissionError(f"partner refused login {user}:{password}")


@task
def exits(code):
    sys.exit(code)
