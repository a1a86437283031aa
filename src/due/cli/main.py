"""The `due` command group; its commands live in the modules beside this one."""

from __future__ import annotations

import click
from click.core import ParameterSource

from due.cli.common import APP_HELP, DJANGO_HELP, URL_HELP, DueGroup, Settings
from due.logs import quiet_driver_pool


@click.group(cls=DueGroup)
@click.option("--url", envvar="DUE_DATABASE_URL", help=URL_HELP)
@click.option("--app", "app_spec", envvar="DUE_APP", help=APP_HELP)
@click.option("--django", metavar="SETTINGS", help=DJANGO_HELP)
@click.version_option(package_name="due")
@click.pass_context
def main(ctx: click.Context, url: str | None, app_spec: str | None, django: str | None) -> None:
    """due: background jobs, delayed jobs and schedules without quiet failures.

    Give your app (--app module:attribute) or the database (--url) before the
    command or after it.
    """
    quiet_driver_pool()  # due says it once, with the fix: not psycopg's line and then due's
    settings = Settings()
    for option, value in (("url", url), ("app_spec", app_spec), ("django", django)):
        typed = ctx.get_parameter_source(option) == ParameterSource.COMMANDLINE
        settings.give(option, value, from_command_line=typed)
    ctx.obj = settings
    ctx.call_on_close(settings.close)
