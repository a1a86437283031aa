"""The Django app `due.contrib.django` (label `due`)."""

from __future__ import annotations

from django.apps import AppConfig


class DueConfig(AppConfig):  # type: ignore[misc]
    name = "due.contrib.django"
    label = "due"
    verbose_name = "due"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from due.contrib.django import configuration
        from due.contrib.django.schema import after_migrate

        post_migrate.connect(after_migrate, sender=self, dispatch_uid="due.after_migrate")

        configuration.load_tasks()
        alias = configuration.backend_alias()
        if configuration.uses_due(alias):
            from due.contrib.django import due_app
            from due.contrib.django.running import register_seen

            app = due_app(alias)
            register_seen(app, alias)  # tasks of other backends too: any may be sent here
            configuration.define_schedules(app)
