"""Read-only query commands: thin click wrappers over ledger.queries."""

from __future__ import annotations

import functools

import click

from agentledger.cli import cli
from agentledger.cli.output import emit_json, emit_pairs, emit_table
from agentledger.ledger import queries
from agentledger.ledger.db import open_reader
from agentledger.timeutil import parse_time


def _time(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def query_options(default_limit: int | None):
    """--json, --since, --until, --agent, --limit: the same on every query command."""

    def decorate(fn):
        @click.option("--json", "as_json", is_flag=True, help="Print JSON (stable keys) instead of a table.")
        @click.option("--since", callback=_time, metavar="TIME",
                      help="From this time on (inclusive): 2026-11-01, an ISO time, or an age like 7d, 24h, 30m.")
        @click.option("--until", callback=_time, metavar="TIME", help="Up to this time (inclusive), same forms.")
        @click.option("--agent", metavar="ID", help="Only this agent id.")
        @click.option("--limit", type=click.IntRange(min=1), default=default_limit, show_default=True,
                      help="At most this many rows.")
        @click.pass_obj
        @functools.wraps(fn)
        def wrapper(obj, as_json, since, until, agent, limit, **kwargs):
            if since is not None and until is not None and since > until:
                raise click.BadParameter("--since is after --until", param_hint="--since")
            conn = open_reader(obj.db)
            try:
                w = queries.Window(since=since, until=until, agent=agent, limit=limit)
                return fn(conn, w, as_json, **kwargs)
            finally:
                conn.close()

        return wrapper

    return decorate


@cli.command()
@query_options(default_limit=50)
def sessions(conn, w, as_json):
    """Sessions with their runs, calls, tokens and cost, most recent first."""
    rows = queries.sessions(conn, w)
    if as_json:
        emit_json(rows)
    elif not rows:
        click.echo("no sessions match")
    else:
        emit_table(rows, [("session_key", "session"), ("agent_id", "agent"), ("status", "status"),
                          ("started_at", "started"), ("runs", "runs"), ("llm_calls", "llm"),
                          ("tool_calls", "tools"), ("tool_errors", "tool err"),
                          ("total_tokens", "tokens"), ("cost_usd", "cost $")])


@cli.command()
@query_options(default_limit=None)
def usage(conn, w, as_json):
    """Totals: sessions, runs, calls, tokens and cost over the window."""
    row = queries.usage(conn, w)
    if as_json:
        emit_json(row)
    else:
        emit_pairs([(k.replace("_", " "), v) for k, v in row.items()])


@cli.command()
@query_options(default_limit=100)
def rejects(conn, w, as_json):
    """Lines that could not be indexed, with file, offset and reason."""
    rows = queries.rejects(conn, w)
    if as_json:
        emit_json(rows)
    elif not rows:
        click.echo("no rejected lines")
    else:
        emit_table(rows, [("path", "file"), ("offset", "offset"), ("length", "bytes"), ("reason", "reason"),
                          ("head", "starts with")])


@cli.command(name="inputs")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def files_cmd(obj, as_json):
    """Tailed log files: where each one is read up to, and any that were lost."""
    conn = open_reader(obj.db)
    try:
        rows = queries.file_status(conn)
    finally:
        conn.close()
    if as_json:
        emit_json(rows)
    elif not rows:
        click.echo("no files tailed yet")
    else:
        emit_table(rows, [("source", "source"), ("path", "file"), ("status", "status"), ("offset", "offset"),
                          ("size", "size"), ("lines", "lines"), ("lost_bytes", "lost bytes")])
