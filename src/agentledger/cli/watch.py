"""``agentledger watch``: the live terminal view (drawn by ``live_view``)."""

from __future__ import annotations

import math

import click

from agentledger.cli import cli, daemon_url
from agentledger.defaults import MAX_WAIT_S


def _a_number(ctx: click.Context, param: click.Parameter, value: float) -> float:
    # A range lets NaN through (it compares false with both ends): redraws would never pause.
    if math.isnan(value):
        raise click.BadParameter(f"{value} is not a number of seconds: give one from 0.2 to {MAX_WAIT_S}")
    return value


@cli.command()
@click.option("--url", default=None, metavar="URL",
              help="The daemon to ask (default: $AGENTLEDGER_URL, else the config's `[http] listen`); when none "
                   "answers, the ledger is read directly.")
@click.option("--interval", type=click.FloatRange(min=0.2, max=MAX_WAIT_S), default=1.0, show_default=True,
              callback=_a_number, metavar="SECONDS", help="Seconds between redraws.")
@click.option("--sessions", "n_sessions", type=click.IntRange(1, 50), default=8, show_default=True,
              help="At most this many sessions.")
@click.option("--once", is_flag=True, help="Print one snapshot and exit (what it does when stdout is not a terminal).")
@click.pass_obj
def watch(obj, url: str | None, interval: float, n_sessions: int, once: bool) -> None:
    """A live view: latest sessions with cost, burn rate ($/h over 10 minutes) and tokens per minute,
    headroom to each gate and the projected time until it trips, recent failures, ingest lag.
    Press q or Ctrl-C to quit."""
    from agentledger.cli import live_view

    live_view.run(obj.config, daemon_url(url, obj.config), interval, n_sessions, once)
