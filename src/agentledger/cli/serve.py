"""``agentledger serve``: catch up, then follow live."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agentledger.cli import cli
from agentledger.cli.ingest import RootPath, pricer_for, with_sources
from agentledger.defaults import MAX_WAIT_S


@cli.command()
@with_sources
@click.option("--max-line", type=click.IntRange(min=1024), default=None,
              help="Longest line indexed, in bytes (config `max_line`, default 32 MiB).")
@click.option("--rescan", type=click.FloatRange(min=0.05, max=MAX_WAIT_S), default=None, metavar="SECONDS",
              help="Seconds between full rescans; inotify wakes it sooner (config `rescan_s`, default 2).")
@click.option("--demo/--no-demo", default=None,
              help="Run on the demo directory alone, fed by a live writer of invented events, in place of the "
                   "config's [[sources]] and the usual locations, into a ledger and state dir of its own there (or "
                   "the ledger --db names); not with ROOT or --source (default: only when no agent logs exist).")
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="Where the HTTP API listens; port 0 picks a free one "
                   "(config `[http] listen`, default 127.0.0.1:9464).")
@click.option("--grace", type=click.FloatRange(min=0, max=MAX_WAIT_S), default=None, metavar="SECONDS",
              help="Runs, tool calls and subagents open longer than this become interrupted "
                   "(config `[reconcile] grace_s`).")
@click.option("--idle", type=click.FloatRange(min=1, max=MAX_WAIT_S), default=None, metavar="SECONDS",
              help="A log silent longer than this counts as a gateway restart: its open sessions are suspended "
                   "(config `[reconcile] idle_s`, default 1800).")
@click.argument("roots", nargs=-1, type=RootPath(must_exist=False))  # waited for if not there yet
@click.pass_obj
def serve(obj, fmt: str, sources: list, prices: Path | None, max_line: int | None, rescan: float | None,
          demo: bool | None, listen: str | None, grace: float | None, idle: float | None,
          roots: tuple[Path, ...]) -> None:
    """Catch up on ROOTS (in --format) and every --source (else the config's [[sources]]), then follow
    them live until SIGTERM or Ctrl-C.

    With none it reads what it finds: OpenClaw's state dir ($OPENCLAW_STATE_DIR, read once it
    appears if it does not exist yet; ~/.openclaw, legacy names) and Claude Code's
    ($CLAUDE_CONFIG_DIR, else ~/.config/claude and ~/.claude); else it starts the demo: a directory fed
    by a small live writer, read into a ledger of its own, never the default one.
    """
    from agentledger import logs
    from agentledger.daemon import run_daemon

    if not obj.log_chosen:  # a daemon's start, catch-up, file events and gate blocks are worth a line each
        logs.setup("info", json=obj.log_json)

    pairs = [(fmt, r) for r in roots] + list(sources)
    if demo and pairs:
        # Running the demo beside them would mix its made-up costs into theirs, unasked.
        raise click.UsageError("--demo runs on the demo directory alone, not on ROOT or --source: drop them to run "
                               "the demo, or drop --demo to read them")
    config = obj.configure({"max_line": max_line, "rescan_s": rescan, "http.listen": listen,
                            "reconcile.grace_s": grace, "reconcile.idle_s": idle,
                            "sources": [{"format": f, "root": str(r)} for f, r in pairs] or None})
    sys.exit(run_daemon(config, obj.origins, demo=demo, pricer=pricer_for(prices, config, obj.origins)))
