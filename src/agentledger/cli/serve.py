"""``agentledger serve``: catch up, then follow live."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentledger.cli import cli
from agentledger.http import DEFAULT_LISTEN, parse_listen
from agentledger.ledger.lifecycle import DEFAULT_IDLE_S
from agentledger.ledger.reconcile import DEFAULT_GRACE_S
from agentledger.sources import FORMATS
from agentledger.tail.tailer import DEFAULT_MAX_LINE


@cli.command()
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="oc-telemetry", show_default=True,
              help="Input format of the roots.")
@click.option("--max-line", type=click.IntRange(min=1024), default=DEFAULT_MAX_LINE, show_default=True,
              help="Longest line indexed, in bytes.")
@click.option("--rescan", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="Seconds between full rescans (inotify wakes it sooner).")
@click.option("--demo/--no-demo", default=None,
              help="Run on the demo directory with a live writer (default: only when no agent logs exist).")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where the HTTP API listens (port 0 picks a free one).")
@click.option("--grace", type=click.FloatRange(min=0), default=DEFAULT_GRACE_S, show_default=True, metavar="SECONDS",
              help="Runs, tool calls and subagents open longer than this are marked interrupted.")
@click.option("--idle", type=click.FloatRange(min=1), default=DEFAULT_IDLE_S, show_default=True, metavar="SECONDS",
              help="A log silent longer than this counts as a gateway restart: its open sessions are suspended.")
@click.argument("roots", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.pass_obj
def serve(obj, fmt: str, max_line: int, rescan: float, demo: bool | None, listen: str, grace: float, idle: float,
          roots: tuple[Path, ...]) -> None:
    """Catch up on ROOTS, then follow them live until SIGTERM or Ctrl-C.

    Without ROOTS it reads OpenClaw's state dir ($OPENCLAW_STATE_DIR, ~/.openclaw, legacy names),
    else starts the demo: a directory fed by a small live writer.
    """
    from agentledger.daemon import run_daemon

    parse_listen(listen)  # a malformed address is a usage error, before anything starts
    code = run_daemon(obj.db, fmt, list(roots), max_line=max_line, rescan_s=rescan, demo=demo, listen=listen,
                      grace_s=grace, idle_s=idle)
    sys.exit(code)
