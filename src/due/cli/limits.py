"""`due limit` and `due limit set|reset`: the limits, and their numbers at run time."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from due.app import App
from due.cli.common import Settings, reports_errors
from due.cli.documents import limit_document
from due.cli.jobs import JSON_HELP
from due.cli.main import main
from due.cli.output import Column, console, fitted_table, print_json
from due.core.limits import Limit, LimitOverview, shown_key, window_text
from due.errors import ConfigurationError

LIMIT_COLUMNS = [
    Column("limit"),
    Column("concurrency", justify="right"),
    Column("rate", justify="right"),
    Column("set by", drop_rank=1),
    Column("running", justify="right"),
    Column("starts in window", justify="right", drop_rank=2),
    Column("waiting", justify="right"),
    Column("busiest keys", drop_rank=0),
]


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def limit(ctx: click.Context, as_json: bool) -> None:
    """Every limit: its numbers (an operator's marked), jobs running against it,
    starts in its rate's current window, jobs waiting for it, and for a limit
    per key its busiest keys. `due limit set|reset` change the numbers."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_limits, as_json=as_json)


@limit.command("list")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@reports_errors
def list_limits(settings: Settings, as_json: bool) -> None:
    """The same table as `due limit`."""
    overviews = settings.app.limit_overview()
    if as_json:
        print_json({"limits": [limit_document(overview) for overview in overviews]})
        return
    if not overviews:
        console.print("no limit is stored (a worker stores its app's limits as it starts)")
        return
    console.print(limits_table(overviews))


@limit.command("set")
@click.argument("name")
@click.option("--rate", help="At most N starts per period: 50/s, 10/m, 1000/h, 5/10m.")
@click.option("--concurrency", type=int, help="At most this many jobs running at once.")
@click.pass_obj
@reports_errors
def set_limit(settings: Settings, name: str, rate: str | None, concurrency: int | None) -> None:
    """Change a limit's numbers on every worker within seconds (workers read them
    at each claim); a number not given keeps the one in force. They stay until
    `due limit reset`, whatever code workers start with."""
    if rate is None and concurrency is None:
        raise click.UsageError("give --rate (like 50/s), --concurrency N, or both")
    app = settings.app
    current = _stored(app, name).limit
    numbers = app.set_limit(
        name,
        rate=rate if rate is not None else current.rate_text,
        concurrency=concurrency if concurrency is not None else current.concurrency,
    )
    console.print(f"limit {name!r} set to {numbers.describe()} (until `due limit reset {name}`)")


@limit.command("reset")
@click.argument("name")
@click.pass_obj
@reports_errors
def reset_limit(settings: Settings, name: str) -> None:
    """Go back to the numbers the code declares (`app.limit(...)`)."""
    app = settings.app
    code = _stored(app, name).code
    app.reset_limit(name)
    console.print(f"limit {name!r} is back to the code's numbers: {code.describe()}")


def _stored(app: App, name: str) -> LimitOverview:
    overviews = {overview.name: overview for overview in app.limit_overview()}
    if name not in overviews:
        known = ", ".join(sorted(overviews)) or "none"
        raise ConfigurationError(f"no limit {name!r} is stored (stored: {known})")
    return overviews[name]


def limits_table(overviews: list[LimitOverview]) -> Table:
    return fitted_table(LIMIT_COLUMNS, [_limit_row(overview) for overview in overviews])


def _limit_row(overview: LimitOverview) -> list[Text | str]:
    numbers = overview.limit
    return [
        overview.name,
        "" if numbers.concurrency is None else str(numbers.concurrency),
        numbers.rate_text or "",
        Text(f"operator (code: {overview.code.describe()})", style="yellow")
        if overview.overridden
        else "code",
        str(overview.running),
        _window(numbers, overview.started_in_window),
        Text(str(overview.waiting), style="yellow") if overview.waiting else "0",
        busiest_text(overview),
    ]


def _window(numbers: Limit, started: int) -> str:
    if numbers.rate is None or numbers.period is None:
        return ""
    return f"{started} of {numbers.rate} in {window_text(numbers.period)}"


def busiest_text(overview: LimitOverview) -> str:
    """A limit per key's busiest keys: `acct-7 (1 running, 2 waiting)`."""
    keyed = [key for key in overview.busiest if key.key]
    return ", ".join(
        f"{shown_key(key.key)} ({key.running} running, {key.waiting} waiting)" for key in keyed
    ) + (f" of {overview.keys} keys" if keyed and overview.keys > len(keyed) else "")
