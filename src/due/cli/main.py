"""The `due` command group; its commands live in the modules beside this one."""

from __future__ import annotations

import click

from due.cli.common import Settings


@click.group()
@click.option("--url", envvar="DUE_DATABASE_URL", help="Database URL (default ./due.db).")
@click.option("--app", "app_spec", envvar="DUE_APP", help="Your app, as module:attribute.")
@click.version_option(package_name="due")
@click.pass_context
def main(ctx: click.Context, url: str | None, app_spec: str | None) -> None:
    """due: background jobs, delayed jobs and schedules without quiet failures."""
    ctx.obj = Settings(url, app_spec)
