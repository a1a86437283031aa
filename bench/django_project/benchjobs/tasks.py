"""The benchmark's tasks: the same no-op as a Django task and as a plain due task."""

from django.tasks import task

from due.contrib.django import due_app


@task
def noop():
    return None


def _plain_noop():
    return None


plain_noop = due_app().task(name="benchjobs.plain_noop", queue="plain")(_plain_noop)
