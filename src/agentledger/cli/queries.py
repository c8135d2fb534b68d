"""Read-only query commands: thin click wrappers over ledger.queries."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import shlex
import sys
from collections.abc import Iterable

import click
import orjson

from agentledger import display
from agentledger.cli import cli, daemon_url
from agentledger.cli.output import (cost_cell, emit_csv, emit_json, emit_json_rows, emit_nested_json, emit_pairs, emit_table, flat,
                                    note_unpriced)
from agentledger.ledger import queries
from agentledger.config import demo_ledger
from agentledger.ledger.db import LedgerError, ledger_exists, open_reader
from agentledger.shown import one_line
from agentledger.timeutil import parse_time


def _time(value: str | None, name: str, zone) -> int | None:
    if value is None:
        return None
    try:
        return parse_time(value, end=name == "until", zone=zone)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{name}") from None


class _Text(click.ParamType):
    """A name or filter as typed. Bytes that are not UTF-8 reach Python as surrogate escapes, which SQLite
    cannot take; they are read as U+FFFD instead. The ledger holds UTF-8 text only, so such a name finds
    nothing, as any unknown name does."""

    name = "text"

    def convert(self, value, param, ctx):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


TEXT = _Text()


def _zone(ctx, param, value):
    """(the zone's name as typed, which titles say back; the zone)"""
    try:
        return value, queries.zone(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _not_blank(what: str, leave_out: str):
    """A blank filter is refused, as the daemon refuses agent=: a script's empty $VAR is a mistake to tell,
    neither everything nor a believable nothing."""
    def check(ctx, param, value):
        if value == "" or (isinstance(value, tuple) and "" in value):
            raise click.BadParameter(f"is blank: give {what}, or leave {param.opts[0]} out for {leave_out}")
        return value
    return check


_LONGEST_PATTERN = 50_000  # bytes: SQLite's own bound on what LIKE and GLOB match against


def _glob(ctx, param, value):
    value = _not_blank("a path or glob", "every file")(ctx, param, value)
    if value is not None and len(value.encode("utf-8", "surrogateescape")) > _LONGEST_PATTERN:
        raise click.BadParameter(f"is longer than {_LONGEST_PATTERN:,} bytes, the longest pattern SQLite matches: "
                                 "give a shorter glob, with * for the rest")
    return value


def query_options(default_limit: int | None, *, one: bool = False, agent: bool = True, limit: bool = True,
                  window: bool = True):
    """--json, --csv, --since/--until (unless no ``window`` applies), --agent and --limit, the same on every
    query command that can apply them; a command about ``one`` session or run takes --json only. A flag a
    command would ignore is not offered, so giving it is an error rather than a surprise."""
    # Apart, not one shared destination: given both, the last one silently won.
    options = [click.option("--json", "as_json", is_flag=True, help="Print JSON (stable keys) instead of a table.")]
    if not one:
        options += [
            click.option("--csv", "as_csv", is_flag=True, help="Print CSV with a header row."),
            *([click.option("--since", metavar="TIME", help="From this time on (inclusive): 2026-11-01, an ISO "
                                                            "time, or an age like 7d, 24h, 30m."),
               click.option("--until", metavar="TIME", help="Up to this time (inclusive), same forms.")]
              if window else []),
            *([click.option("--agent", type=TEXT, callback=_not_blank("an agent id", "every agent's"), metavar="ID",
                            help="Only this agent id.")]
              if agent else []),
            *([click.option("--limit", type=click.IntRange(min=1, max=queries.MAX_LIMIT), default=default_limit,
                            show_default=True, help="At most this many rows.")] if limit else []),
        ]

    def decorate(fn):
        @click.pass_obj
        @functools.wraps(fn)
        def wrapper(obj, as_json=False, as_csv=False, since=None, until=None, agent=None, limit=None, **kwargs):
            if as_json and as_csv:
                raise click.BadParameter("--csv is given too: print one format, --json or --csv", param_hint="--json")
            fmt = "json" if as_json else "csv" if as_csv else None
            # A command that counts days in a zone (--tz) reads a date there too: its days are that zone's.
            zone = kwargs["tz"][1] if "tz" in kwargs else dt.timezone.utc
            since, until = _time(since, "since", zone), _time(until, "until", zone)
            try:
                w = queries.Window(since=since, until=until, agent=agent, limit=limit)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--since") from None
            if kwargs.get("live"):  # answered by the running daemon, not the database
                return fn(None, w, fmt, **kwargs)
            conn = _open(obj)
            try:
                with _snapshot_until_output(conn):
                    return fn(conn, w, fmt, **kwargs)
            finally:
                conn.close()

        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper

    return decorate


class _Releasing:
    """stdout, calling ``release`` before its first write."""

    def __init__(self, stream, release):
        self._stream, self._release = stream, release

    def write(self, text: str) -> int:
        self._release()
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _snapshot_until_output(conn):
    """One read snapshot for an answer's queries, so a table's rows, its total and a session's parts agree
    while serve commits; ended at the answer's first output, not after its last: a pipe read slowly (a
    pager left open) would hold it, and a snapshot held keeps serve from checkpointing the ledger's WAL,
    which grows meanwhile."""
    def release():
        if not conn.getautocommit():
            conn.execute("COMMIT")

    conn.execute("BEGIN")
    stdout, sys.stdout = sys.stdout, _Releasing(sys.stdout, release)
    try:
        yield
    finally:
        sys.stdout = stdout
        release()


def _open(obj):
    """The ledger to read. The demo fills one of its own: a query of the default ledger, made nowhere yet
    while the demo runs, says where the demo's is rather than only to run serve, which is running."""
    try:
        return open_reader(obj.db)
    except LedgerError as exc:
        demo = demo_ledger()
        if obj.origins.of(("db",))[1] is not None or ledger_exists(obj.db) or not ledger_exists(demo):
            raise
        command = click.get_current_context().command_path.partition(" ")[2]
        raise LedgerError(f"{exc}; the demo's invented events are in a ledger of their own: "
                          f"`agentledger --db {shlex.quote(str(demo))} {command}`") from None


def _emit_rows(rows: Iterable[dict], fields: Iterable[str], fmt: str | None, empty: str,
               columns: list[tuple[str, str]]) -> None:
    """``fields``: the keys of such a row, the CSV's header when there is none. JSON and CSV are made as the
    rows come; a table takes them all first (its widths)."""
    if fmt == "json":
        emit_json_rows(rows)
        return
    if fmt == "csv":
        emit_csv(rows, fields)
        return
    rows = list(rows)
    if not rows:
        click.echo(empty)
    else:
        emit_table(rows, columns)


def _live_sessions(url: str, w: queries.Window) -> list[dict]:
    import urllib.error
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({k: v for k, v in (("agent", w.agent), ("limit", w.limit)) if v is not None})
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/v1/hot?{query}", timeout=5) as response:
            return orjson.loads(response.read())
    except urllib.error.HTTPError as exc:  # it answered: starting one is not the fix
        raise click.ClickException(f"the daemon at {url} answered HTTP {exc.code}: {_told(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"no daemon answers at {url} ({exc}): start `agentledger serve`, or pass --url")


def _told(answer) -> str:
    """What an error answer says: the daemon's own words (its JSON ``error``), else the status's reason."""
    try:
        said = orjson.loads(answer.read(64 * 1024)).get("error")
    except (OSError, ValueError, AttributeError):  # unreadable, not JSON, not an object
        said = None
    return one_line(said) if isinstance(said, str) and said.strip() else one_line(str(answer.reason))


@cli.command()
@click.option("--live", is_flag=True, help="The running daemon's hot session views, as its gates see them.")
@click.option("--url", default=None, metavar="URL",
              help="The daemon, with --live (default: $AGENTLEDGER_URL, else the config's `[http] listen`).")
@query_options(default_limit=50)
def sessions(conn, w, fmt, live, url):
    """Sessions with their runs, calls, tokens and cost, most recent first."""
    if url is not None and not live:
        raise click.BadParameter("only with --live: without it sessions are read from the ledger, not asked of "
                                 "a daemon", param_hint="--url")
    if live:
        if w.since is not None or w.until is not None:
            raise click.BadParameter("the daemon's views are of now: drop --since/--until, or --live",
                                     param_hint="--live")
        from agentledger.gates import hot_json
        from agentledger.hot.sessions import HotSession

        url = daemon_url(url, click.get_current_context().obj.config)
        _emit_rows(_live_sessions(url, w), flat(hot_json(HotSession())), fmt, "no live sessions", [
            ("session_key", "session"), ("agent_id", "agent"), ("status", "status"),
            ("last_activity_at", "last activity"), ("current_run", "run"), ("llm_calls", "llm"),
            ("tool_calls", "tools"), ("tool_errors", "tool err"), ("total_tokens", "tokens"), ("cost_usd", "cost $"),
            ("unpriced_calls", "unpriced")])
        return
    _emit_rows(queries.sessions(conn, w), queries.SESSION_FIELDS, fmt, "no sessions match", [
        ("session_key", "session"), ("agent_id", "agent"), ("status", "status"), ("started_at", "started"),
        ("runs", "runs"), ("llm_calls", "llm"), ("tool_calls", "tools"), ("tool_errors", "tool err"),
        ("total_tokens", "tokens"), ("cost_usd", "cost $")])


def _chart_option(fn):
    return click.option("--chart", is_flag=True,
                        help="Draw a bar chart in the terminal (a table when stdout is not a terminal).")(fn)


def _charting(chart: bool, fmt: str | None) -> bool:
    """Whether to draw: a chart is for a person at a terminal; piped, the table stands in."""
    if chart and fmt is not None:
        raise click.BadParameter(f"draws for a terminal: drop --{fmt}, or --chart", param_hint="--chart")
    return chart and sys.stdout.isatty()


@cli.command()
@query_options(default_limit=None, limit=False)
@_chart_option
def usage(conn, w, fmt, chart):
    """Totals: sessions, runs, calls, tokens and cost over the window; --chart adds tokens per day.

    rejected_lines counts the lines read in the window that could not be indexed (by when they were
    read); such a line names no agent, so with --agent it is unknown (null)."""
    charting = _charting(chart, fmt)  # refused before anything is printed, not after
    row = queries.usage(conn, w)
    if fmt == "json":
        emit_json(row)
    elif fmt == "csv":
        emit_csv([row], row)
    else:
        emit_pairs([(k.replace("_", " "), cost_cell(v, row["unpriced_calls"]) if k == "cost_usd" else v)
                    for k, v in row.items()])
        note_unpriced(row["unpriced_calls"])
    if not chart:  # with a format, refused above
        return
    days = {r["day"]: r for r in queries.costs(conn, w, "day")}
    kinds = [("input", "input_tokens"), ("output", "output_tokens"), ("cache read", "cache_read_tokens"),
             ("cache write", "cache_write_tokens")]
    click.echo()
    if charting:
        from agentledger.cli import charts  # rich only when drawing

        if charts.print_bars([(day, [(name, days[day][k]) for name, k in kinds] if day in days else [])
                              for day in charts.filled_days(list(days.values()))],
                             display.tokens, "tokens per day (UTC), by kind"):
            return
    # Piped, or a terminal too narrow for bars: the table the chart would draw.
    emit_table(list(days.values()), [("day", "day"), *((k, name) for name, k in kinds)])


_LATENCY = ("p50_ms", "p95_ms", "p99_ms")  # what --latency adds to a costs row


@cli.command()
@query_options(default_limit=None)
@click.option("--group-by", "group_by", type=click.Choice(queries.GROUP_BY), default="model", show_default=True,
              help="What to group spend by.")
@click.option("--tz", default="UTC", show_default=True, metavar="ZONE", callback=_zone,
              help="Time zone that days are counted in (IANA name, e.g. Europe/Berlin).")
@click.option("--latency", is_flag=True,
              help="With --group-by model: add p50/p95/p99 call duration (reads every call in the window).")
@_chart_option
def costs(conn, w, fmt, group_by, tz, latency, chart):
    """Spend grouped by model, provider, agent, session, day or tool, with a grand total;
    --chart draws it (days stacked by model).

    --json is one object: group_by, rows (at most --limit) and total, the window's grand total whatever
    the limit; --csv the rows alone."""
    _, local = tz
    report = queries.costs_report(conn, w, group_by, local)
    rows, total = report["rows"], report["total"]
    if _charting(chart, fmt) and _costs_chart(conn, w, rows, total, group_by, tz):
        return
    if latency:
        if group_by != "model":
            raise click.BadParameter("only with --group-by model", param_hint="--latency")
        lat = queries.model_latency(conn, w)
        for r in rows:
            r.update(zip(_LATENCY, lat.get(r["model"] or "", (None, None, None))))
    if fmt == "json":
        emit_json(report)
        return
    if fmt == "csv":
        emit_csv(rows, queries.cost_fields(group_by) + (_LATENCY if latency else ()))
        return
    if not rows:
        click.echo("no spend in this window")
        return
    label = queries.cost_fields(group_by)[0]
    # The window's grand total, whatever --limit shows of it.
    total_row = {label: "TOTAL" if len(rows) == total["groups"] else f"TOTAL of all {total['groups']}", **total}
    if group_by == "tool":
        emit_table(rows + [total_row], [("tool", "tool"), ("calls", "calls"), ("errors", "errors"),
                                        ("duration_s", "time s")])
        return
    latency_columns = [(k, k.replace("_", " ")) for k in _LATENCY] if latency else []
    # A row is a session instance: a key reset several times has several, told apart by their ids.
    instance = [("session_id", "id")] if group_by == "session" else []
    emit_table(rows + [total_row], [(label, group_by), *instance, ("llm_calls", "llm calls"),
                                    ("total_tokens", "tokens"), ("cost_usd", "cost $")] + latency_columns)


def _costs_chart(conn, w, rows: list[dict], total: dict, group_by: str, tz: tuple) -> bool:
    """Draw the costs; False, drawing nothing, on a terminal too narrow for bars, where the table stands in."""
    from agentledger.cli import charts  # rich only when drawing

    if not rows:
        return False  # the table's "no spend in this window"
    if group_by == "tool":  # tools carry no cost: their calls, errors stacked on successes
        return charts.print_bars([(r["tool"] or "?", [("ok", r["calls"] - r["errors"]), ("errors", r["errors"])])
                                  for r in rows], lambda v: f"{v:,.0f}", "tool calls (errors stacked)")
    unpriced = total["unpriced_calls"]
    cost = display.cost(total["cost_usd"], unpriced)
    if group_by == "day":
        by_day: dict[str, list] = {}
        name, local = tz
        for r in queries.daily_costs_by_model(conn, w, local):
            by_day.setdefault(r["day"], []).append((r["model"] or "?", r["cost_usd"], r["unpriced_calls"]))
        drawn = charts.print_bars([(day, by_day.get(day, [])) for day in charts.filled_days(rows)], display.usd,
                                  f"spend per day ({name}), stacked by model; total {cost}")
    else:
        label = queries.cost_fields(group_by)[0]
        drawn = charts.print_bars([(str(r[label] or "?"), [("cost", r["cost_usd"], r["unpriced_calls"])])
                                   for r in rows], display.usd, f"spend by {group_by}; total {cost}")
    if drawn:
        note_unpriced(unpriced)
    return drawn


@cli.command()
@query_options(default_limit=100, agent=False)
def rejects(conn, w, fmt):
    """Lines that could not be indexed, with file, offset and reason; --since/--until are when they were read.

    A line that could not be read names no agent: there is no --agent."""
    _emit_rows(queries.rejects(conn, w), queries.REJECT_FIELDS, fmt, "no rejected lines",
               [("path", "file"), ("offset", "offset"), ("length", "bytes"), ("reason", "reason"),
                ("head", "starts with")])


@cli.command(name="inputs")
@query_options(default_limit=None, agent=False, limit=False, window=False)
def inputs(conn, w, fmt):
    """Tailed log files: where each one is read up to, any that were lost, and any input that cannot be read
    (a log, a directory of them, an OpenClaw sessions.json).

    Every file as it is now: there is no --since/--until, --agent or --limit."""
    rows = queries.file_status(conn)
    columns = [("source", "source"), ("path", "file"), ("status", "status"), ("offset", "offset"),
               ("size", "size"), ("lines", "lines"), ("lost_bytes", "lost bytes")]
    if any(row["reason"] for row in rows):  # else a column of dashes
        columns.append(("reason", "reason"))
    _emit_rows(rows, queries.FILE_STATUS_FIELDS, fmt, "no files tailed yet", columns)


_RUN_TABLE = [("run_id", "run"), ("session_key", "session"), ("model", "model"), ("status", "status"),
              ("started_at", "started"), ("llm_calls", "llm"), ("tool_calls", "tools"), ("total_tokens", "tokens"),
              ("cost_usd", "cost $")]
_TOOL_CALL_TABLE = [("tool_call_id", "call"), ("tool_name", "tool"), ("status", "status"),
                    ("started_at", "started"), ("duration_ms", "ms"), ("error", "error")]


def _emit_detail(detail: dict, fmt: str | None, sections: list[tuple[str, str, list[tuple[str, str]]]],
                 summary: list[tuple[str, object]], unpriced: int) -> None:
    """``unpriced``: the calls the summary's costs leave out, which every section's are part of."""
    if fmt == "json":
        emit_json(detail)
        return
    emit_pairs(summary)
    for key, title, columns in sections:
        rows = detail[key]
        click.echo(f"\n{title} ({len(rows)})")
        if rows:
            emit_table(rows, columns, note=False)
    if unpriced:
        click.echo()
        note_unpriced(unpriced)


@cli.command()
@query_options(default_limit=None, one=True)
@click.argument("key", type=TEXT)
def session(conn, w, fmt, key):
    """One session: instances, cost by model, runs, tools, subagents. A session key shows all its
    instances; a session id, that instance and the subagents it spawned."""
    d = queries.session_detail(conn, key)
    first = d["instances"][0]
    _emit_detail(d, fmt, [
        ("instances", "instances", [("session_id", "session id"), ("status", "status"), ("started_at", "started"),
                                    ("ended_at", "ended"), ("end_reason", "end"), ("suspensions", "suspended"),
                                    ("suspended_s", "away s"), ("runs", "runs"), ("cost_usd", "cost $")]),
        ("cost_by_model", "cost by model", [("model", "model"), ("llm_calls", "llm calls"),
                                            ("total_tokens", "tokens"), ("cost_usd", "cost $")]),
        ("runs", "runs", _RUN_TABLE[:1] + _RUN_TABLE[2:]),
        ("tool_calls", "tool calls", _TOOL_CALL_TABLE),
        ("subagents", "subagents", [("child_session_key", "child"), ("label", "label"), ("outcome", "outcome"),
                                    ("cost_usd", "cost $")]),
        ("compactions", "compactions", [("at", "at"), ("messages_before", "msgs before"),
                                        ("messages_after", "msgs after"), ("tokens_before", "tokens before"),
                                        ("tokens_after", "tokens after"), ("compaction_ratio", "ratio")]),
    ], [("session", d["session_key"] or first["session_id"]), ("agent", first["agent_id"]),
        ("cost $", cost_cell(d["cost_usd"], d["unpriced_calls"])),
        ("with subagents $", cost_cell(d["family_cost_usd"], d["family_unpriced_calls"]))],
        d["family_unpriced_calls"])


@cli.command(name="runs")
@query_options(default_limit=50)
def runs_cmd(conn, w, fmt):
    """Runs (agent turns), most recent first, with their calls, tokens and cost."""
    _emit_rows(queries.runs(conn, w), queries.RUN_FIELDS, fmt, "no runs match", _RUN_TABLE)


@cli.command()
@query_options(default_limit=None, one=True)
@click.argument("run_id", type=TEXT)
def run(conn, w, fmt, run_id):
    """One run: status, reported usage, its tool calls and its model calls."""
    d = queries.run_detail(conn, run_id)
    _emit_detail(d, fmt, [
        ("tool_calls_list", "tool calls", _TOOL_CALL_TABLE),
        # A failed call is listed with its error, as a failed tool call is: its row alone says it failed.
        ("model_calls", "model calls", [("at", "at"), ("model", "model"), ("total_tokens", "tokens"),
                                        ("cost_usd", "cost $"), ("duration_ms", "ms"), ("error", "error")]),
    ], [("run", d["run_id"]), ("session", d["session_key"]), ("model", d["model"]), ("status", d["status"]),
        ("error", d["error"]), ("cost $", cost_cell(d["cost_usd"], d["unpriced_calls"]))], d["unpriced_calls"])


@cli.command(name="tools")
@query_options(default_limit=None)
@click.option("--name", type=TEXT, callback=_not_blank("a tool name", "every tool"), metavar="TOOL",
              help="Only this tool.")
@click.option("--errors-only", is_flag=True, help="Only tools that failed at least once.")
def tools_cmd(conn, w, fmt, name, errors_only):
    """Tool calls by tool: calls, errors, error rate, duration percentiles and total time."""
    _emit_rows(queries.tools(conn, w, name=name, errors_only=errors_only), queries.TOOL_FIELDS, fmt,
               "no tool calls match",
               [("tool", "tool"), ("calls", "calls"), ("errors", "errors"), ("error_rate", "err rate"),
                ("p50_ms", "p50 ms"), ("p95_ms", "p95 ms"), ("p99_ms", "p99 ms"), ("duration_s", "time s")])


@cli.command()
@query_options(default_limit=None, agent=False)
@click.option("--kinds", metavar="K1,K2", help=f"Only these kinds: {', '.join(queries.TIMELINE_KINDS)}.")
@click.argument("key", type=TEXT)
def timeline(conn, w, fmt, kinds, key):
    """Everything that happened in one session, in time order."""
    # Given blank, it names no kind, as "run," names a blank one: all kinds is what leaving it out says.
    wanted = None if kinds is None else [k.strip() for k in kinds.split(",")]
    bad = [k for k in wanted or [] if k not in queries.TIMELINE_KINDS]
    if bad:
        raise click.BadParameter(f"unknown kind {bad[0]!r}: choose from {', '.join(queries.TIMELINE_KINDS)}",
                                 param_hint="--kinds")
    _emit_rows(queries.timeline(conn, key, wanted, w), queries.TIMELINE_FIELDS, fmt,
               "nothing happened in this session in this window",
               [("at", "at"), ("kind", "kind"), ("what", "what"), ("cost_usd", "cost $")])


@cli.command(name="subagents")
@query_options(default_limit=50)
def subagents_cmd(conn, w, fmt):
    """Subagents spawned, with their parent, outcome and cost."""
    _emit_rows(queries.subagents(conn, w), queries.SUBAGENT_FIELDS, fmt, "no subagents match",
               [("child_session_key", "child"), ("parent_session_key", "parent"), ("label", "label"),
                ("outcome", "outcome"), ("duration_ms", "ms"), ("cost_usd", "cost $")])


def _tree_rows(root: dict, name: str | None = None) -> list[dict]:
    # Indented under its parent; in a narrow terminal the session column folds and the costs stay whole.
    # A stack of its own, not recursion: a chain of subagents may run deeper than Python recurses.
    rows, todo = [], [(root, 0, name or root["session_key"])]
    while todo:
        node, depth, shown = todo.pop()
        rows.append({**node, "session": "  " * depth + shown})
        todo.extend((child, depth + 1, child["session_key"]) for child in reversed(node["children"]))
    return rows


@cli.command()
@query_options(default_limit=None, one=True)
@click.argument("key", type=TEXT)
def tree(conn, w, fmt, key):
    """A session and its subagents, recursively, with each node's own and cumulative cost."""
    root = queries.tree(conn, key)
    if fmt == "json":
        emit_nested_json(root)
    else:
        # Asked by a session id, the root is that one instance of its key: say which.
        name = f"{root['session_key']} (session {key})" if key != root["session_key"] else None
        emit_table(_tree_rows(root, name=name), [("session", "session"), ("label", "label"),
                                                 ("own_cost_usd", "own $"), ("cumulative_cost_usd", "total $")],
                   note=False)
        note_unpriced(root["cumulative_unpriced_calls"])


@cli.command(name="errors")
@query_options(default_limit=100)
def errors_cmd(conn, w, fmt):
    """Failed runs and failed tool calls, most recent first."""
    _emit_rows(queries.errors(conn, w), queries.ERROR_FIELDS, fmt, "no errors in this window",
               [("at", "at"), ("kind", "kind"), ("name", "what"), ("session_key", "session"), ("error", "error")])


@cli.command()
@query_options(default_limit=10)
@click.argument("what", type=click.Choice(queries.TOP))
def top(conn, w, fmt, what):
    """The biggest runs, tools, models or sessions (by cost; tools by calls)."""
    rows = queries.top(conn, w, what)
    columns = {"runs": _RUN_TABLE,
               "tools": [("tool", "tool"), ("calls", "calls"), ("errors", "errors"), ("p95_ms", "p95 ms")],
               "models": [("model", "model"), ("llm_calls", "llm calls"), ("cost_usd", "cost $")],
               "sessions": [("session_key", "session"), ("session_id", "id"), ("llm_calls", "llm calls"),
                            ("cost_usd", "cost $")]}[what]
    _emit_rows(rows, queries.top_fields(what), fmt, f"no {what} in this window", columns)


@cli.command(name="events")
@query_options(default_limit=100)
@click.option("--kind", "kinds", type=TEXT, multiple=True, callback=_not_blank("an event kind", "every kind"),
              metavar="KIND",
              help="Only this event kind (repeatable).")
def events_cmd(conn, w, fmt, kinds):
    """Raw events as indexed, most recent first, with the file and offset they came from."""
    _emit_rows(queries.events(conn, w, kinds=list(kinds)), queries.EVENT_FIELDS, fmt, "no events match",
               [("at", "at"), ("kind", "kind"), ("session_key", "session"), ("file", "file"), ("offset", "offset")])


@cli.command(name="files")
@query_options(default_limit=100)
@click.option("--path", "path_glob", type=TEXT, callback=_glob, metavar="GLOB",
              help="Only paths matching this glob (* and ?).")
def files_cmd(conn, w, fmt, path_glob):
    """Tool calls that touched a file, most recent first."""
    _emit_rows(queries.files(conn, w, path_glob=path_glob), queries.TOOL_CALL_FIELDS, fmt,
               "no tool calls touched a matching file",
               [("file_path", "file"), ("tool_name", "tool"), ("status", "status"), ("started_at", "at"),
                ("session_key", "session")])
