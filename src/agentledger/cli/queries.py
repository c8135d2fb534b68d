"""Read-only query commands: thin click wrappers over ledger.queries."""

from __future__ import annotations

import functools

import click

from agentledger.cli import cli
from agentledger.cli.output import emit_csv, emit_json, emit_pairs, emit_table
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
        @click.option("--json", "fmt", flag_value="json", help="Print JSON (stable keys) instead of a table.")
        @click.option("--csv", "fmt", flag_value="csv", help="Print CSV with a header row.")
        @click.option("--since", callback=_time, metavar="TIME",
                      help="From this time on (inclusive): 2026-11-01, an ISO time, or an age like 7d, 24h, 30m.")
        @click.option("--until", callback=_time, metavar="TIME", help="Up to this time (inclusive), same forms.")
        @click.option("--agent", metavar="ID", help="Only this agent id.")
        @click.option("--limit", type=click.IntRange(min=1), default=default_limit, show_default=True,
                      help="At most this many rows.")
        @click.pass_obj
        @functools.wraps(fn)
        def wrapper(obj, fmt, since, until, agent, limit, **kwargs):
            if since is not None and until is not None and since > until:
                raise click.BadParameter("--since is after --until", param_hint="--since")
            conn = open_reader(obj.db)
            try:
                w = queries.Window(since=since, until=until, agent=agent, limit=limit)
                return fn(conn, w, fmt, **kwargs)
            finally:
                conn.close()

        return wrapper

    return decorate


def _emit_rows(rows: list[dict], fmt: str | None, empty: str, columns: list[tuple[str, str]]) -> None:
    if fmt == "json":
        emit_json(rows)
    elif fmt == "csv":
        emit_csv(rows)
    elif not rows:
        click.echo(empty)
    else:
        emit_table(rows, columns)


@cli.command()
@query_options(default_limit=50)
def sessions(conn, w, fmt):
    """Sessions with their runs, calls, tokens and cost, most recent first."""
    _emit_rows(queries.sessions(conn, w), fmt, "no sessions match", [("session_key", "session"), ("agent_id", "agent"), ("status", "status"),
                          ("started_at", "started"), ("runs", "runs"), ("llm_calls", "llm"),
                          ("tool_calls", "tools"), ("tool_errors", "tool err"),
                          ("total_tokens", "tokens"), ("cost_usd", "cost $")])


@cli.command()
@query_options(default_limit=None)
def usage(conn, w, fmt):
    """Totals: sessions, runs, calls, tokens and cost over the window."""
    row = queries.usage(conn, w)
    if fmt == "json":
        emit_json(row)
    elif fmt == "csv":
        emit_csv([row])
    else:
        emit_pairs([(k.replace("_", " "), v) for k, v in row.items()])


@cli.command()
@query_options(default_limit=None)
@click.option("--group-by", "group_by", type=click.Choice(queries.GROUP_BY), default="model", show_default=True,
              help="What to group spend by.")
@click.option("--tz", default="UTC", show_default=True, metavar="ZONE",
              help="Time zone that days are counted in (IANA name, e.g. Europe/Berlin).")
def costs(conn, w, fmt, group_by, tz):
    """Spend grouped by model, provider, agent, session, day or tool, with a grand total."""
    rows = queries.costs(conn, w, group_by, tz)
    if fmt == "json":
        emit_json(rows)
        return
    if fmt == "csv":
        emit_csv(rows)
        return
    if not rows:
        click.echo("no spend in this window")
        return
    if group_by == "tool":
        emit_table(rows, [("tool", "tool"), ("calls", "calls"), ("errors", "errors"), ("duration_s", "time s")])
        return
    label = {"agent": "agent_id", "session": "session_key"}.get(group_by, group_by)
    total = {label: "TOTAL", "llm_calls": sum(r["llm_calls"] for r in rows),
             "total_tokens": sum(r["total_tokens"] for r in rows),
             "cost_usd": round(sum(r["cost_usd"] for r in rows), 12)}
    emit_table(rows + [total], [(label, group_by), ("llm_calls", "llm calls"), ("total_tokens", "tokens"),
                                ("cost_usd", "cost $")])


@cli.command()
@query_options(default_limit=100)
def rejects(conn, w, fmt):
    """Lines that could not be indexed, with file, offset and reason."""
    _emit_rows(queries.rejects(conn, w), fmt, "no rejected lines",
               [("path", "file"), ("offset", "offset"), ("length", "bytes"), ("reason", "reason"),
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
