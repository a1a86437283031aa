"""due's tables, created and upgraded by `manage.py migrate`.

One Django migration stands for all of due's own (numbered, checksummed and
applied under a lock by `App.migrate`): running it again after upgrading due
applies the ones that are new, so it runs on every `manage.py migrate` (an
`elidable` no-op for Django's bookkeeping is not enough; see `DueMigrate`).
"""

from __future__ import annotations

from django.db import migrations

from due.contrib.django.schema import migrate_for_connection


class Migration(migrations.Migration):  # type: ignore[misc]
    # Not in Django's transaction: due migrates on its own connection, under its
    # own lock, and SQLite allows one writer at a time.
    atomic = False
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        migrations.RunPython(migrate_for_connection, migrations.RunPython.noop, elidable=False),
    ]
