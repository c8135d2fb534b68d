"""``GET /ui``: one server-rendered page with inline SVG charts — no script, no CDN, works offline.

Spend per day stacked by model, the top sessions, tool error rates, the latest sessions with
gate headroom and projected trips, and ingest health. Everything the logs put on the page is
shown as a table shows it, then HTML-escaped, and the page's Content-Security-Policy forbids scripts
outright.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Sequence
from zoneinfo import ZoneInfo

import apsw
from rich.cells import cell_len

from agentledger import __version__, display
from agentledger.config import GateConfig
from agentledger.ledger import queries
from agentledger.overview import overview
from agentledger.shown import one_line, starting
from agentledger.timeutil import LATEST_MS

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
OTHER = "other models"
REFRESH_MAX = 86_400  # seconds: a page left open a day between reloads is as good as never reloaded (0)


class BadParam(ValueError):
    pass


def _e(value: object) -> str:
    """``value`` as the page shows it: as a table does (shown.one_line), for a session key, a model's or an
    agent's name may hold a control or a right-to-left override that HTML leaves raw; then HTML-escaped."""
    return html.escape(one_line(str(value)), quote=True)


def _param(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


def whole(raw: str, name: str, low: int, high: int) -> int:
    """``raw`` as a whole number from ``low`` to ``high``, else a BadParam naming the parameter."""
    # isdecimal is what int() reads ('²' is a digit it refuses), and int() refuses over 4300 digits
    # with an error of its own: a number with more digits than ``high`` is out of range anyway.
    if not raw.isdecimal() or len(raw.lstrip("0")) > len(str(high)) or not low <= int(raw) <= high:
        raise BadParam(f"{name} must be a whole number from {low} to {high}")
    return int(raw)


def _days(params: dict[str, list[str]], zone: dt.tzinfo, now_ms: int) -> list[dt.date]:
    count = whole(_param(params, "days") or "30", "days", 1, 366)
    last = _param(params, "until")
    if last is None:
        end = dt.datetime.fromtimestamp(now_ms / 1000, zone).date()
    else:
        try:
            end = dt.date.fromisoformat(last)
        except ValueError:
            raise BadParam(f"until must be a date such as 2026-11-01, not {last!r}") from None
        # The ledger holds nothing before 1970, and counting back from year 1 leaves the calendar.
        if end.year < 1970:
            raise BadParam(f"until must be a date from 1970-01-01 to 9999-12-31, not {last!r}")
    return [end - dt.timedelta(days=n) for n in range(count - 1, -1, -1)]


def _ms(day: dt.date, zone: dt.tzinfo) -> int:
    return int(dt.datetime.combine(day, dt.time(), zone).timestamp() * 1000)


def _end_ms(day: dt.date, zone: dt.tzinfo) -> int:
    """The last millisecond of ``day`` in ``zone``."""
    if day == dt.date.max:  # no next day to start from; the ledger holds nothing later than LATEST_MS
        return LATEST_MS
    return _ms(day + dt.timedelta(days=1), zone) - 1


# -- charts ---------------------------------------------------------------------------------------

def _svg(width: int, height: int, body: list[str], label: str, kind: str = "") -> str:
    return (f'<svg class="chart {kind}" viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)}" '
            f'xmlns="http://www.w3.org/2000/svg">{"".join(body)}</svg>')


def _empty(label: str, text: str) -> str:
    return _svg(600, 60, [f'<text x="300" y="35" text-anchor="middle" class="muted">{_e(text)}</text>'], label)


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top``: 1, 2, 2.5 or 5 times a power of ten."""
    if top <= 0:
        return 1.0
    scale = 10 ** math.floor(math.log10(top))
    return next(step * scale for step in (1, 2, 2.5, 5, 10) if step * scale >= top)


def stacked_days(rows: list[dict], days: list[dt.date], colors: dict[str, str]) -> str:
    """Spend per day as bars stacked by model."""
    label = "spend per day, stacked by model"
    by_day: dict[str, list[tuple[str, float, int]]] = {}
    for r in rows:
        by_day.setdefault(r["day"], []).append((r["model"] or "?", r["cost_usd"], r["unpriced_calls"]))
    if not by_day:
        return _empty(label, f"no spend in these {len(days)} days")
    width, height, left, right, bottom, top_pad = 480, 220, 48, 14, 22, 10
    top = _nice(max(sum(c for _, c, _ in parts) for parts in by_day.values()))
    plot_h = height - bottom - top_pad
    slot = (width - left - right) / len(days)
    body = []
    for i in range(5):
        y = top_pad + plot_h * (1 - i / 4)
        body.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                    f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="axis">'
                    f'{_e(display.usd(top * i / 4))}</text>')
    for n, day in enumerate(days):
        x = left + n * slot + slot * 0.12
        y = top_pad + plot_h
        for model, cost, unpriced in by_day.get(day.isoformat(), []):
            h = plot_h * cost / top
            y -= h
            body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.76:.1f}" height="{h:.2f}" '
                        f'fill="{colors.get(model, PALETTE[-1])}"><title>{_e(day)} {_e(model)} '
                        f'{_e(display.cost(cost, unpriced))}</title></rect>')
        if len(days) <= 7 or n % max(len(days) // 5, 1) == 0:
            body.append(f'<text x="{left + (n + 0.5) * slot:.1f}" y="{height - 6}" text-anchor="middle" '
                        f'class="axis">{_e(day.strftime("%m-%d"))}</text>')
    return _svg(width, height, body, label)


# A bar's label fits the chart's width: 60 cells, a wide character (an ideograph, an emoji) taking two.
LABEL_CELLS = 60


def _short(name: str) -> str:
    """``name`` in at most LABEL_CELLS cells, its middle given way: session keys differ at both ends."""
    if cell_len(name) <= LABEL_CELLS:
        return name
    room = (LABEL_CELLS - 1) // 2
    head = starting(name, room)
    tail = starting(name[::-1], LABEL_CELLS - 1 - room)[::-1]
    return head + "…" + tail


def hbars(items: Sequence[tuple[str, float, str]], label: str, empty: str, *, color: str = PALETTE[0],
          scale: float | None = None) -> str:
    """One horizontal bar per (name, value, text shown after the bar)."""
    if not items:
        return _empty(label, empty)
    width, row, text_w = 400, 34, 150
    top = scale or max(v for _, v, _ in items) or 1.0
    body = []
    for n, (name, value, text) in enumerate(items):
        y = n * row
        short = _short(one_line(name))  # cut as shown: its escapes take cells too
        w = max((width - text_w) * min(value / top, 1.0), 1.0 if value else 0.0)
        body.append(f'<text x="0" y="{y + 12}" class="label"><title>{_e(name)}</title>{_e(short)}</text>'
                    f'<rect x="0" y="{y + 16}" width="{w:.1f}" height="12" fill="{color}"/>'
                    f'<text x="{w + 6:.1f}" y="{y + 26}" class="value">{_e(text)}</text>')
    return _svg(width, row * len(items), body, label, "bars")


def meter(used: float, text: str) -> str:
    """How much of a gate's limit is used: green, amber past 80%, red when tripped."""
    color = "#59a14f" if used < 0.8 else "#edc948" if used < 1 else "#e15759"
    w = 120 * min(used, 1.0)
    return (f'<svg class="meter" viewBox="0 0 120 14" role="img" aria-label="{_e(text)}" '
            f'xmlns="http://www.w3.org/2000/svg"><rect width="120" height="14" class="track"/>'
            f'<rect width="{w:.1f}" height="14" fill="{color}"/></svg>')


# -- panels ---------------------------------------------------------------------------------------

def _tr(cells: list[str], numeric: set[int]) -> str:
    """A row of already escaped cells."""
    return "<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{c}</td>' for i, c in enumerate(cells)) + \
        "</tr>"


def _table(headers: list[str], rows: list[str], numeric: set[int], cls: str = "") -> str:
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{_e(h)}</th>' for i, h in enumerate(headers))
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _panel(pid: str, title: str, *content: str) -> str:
    return f'<section class="panel" id="{pid}"><h2>{_e(title)}</h2>{"".join(content)}</section>'


def _gate_cell(g: dict) -> str:
    if g["tripped"]:
        when = "tripped"
    elif g["resets_first"]:
        when = "resets first"
    else:
        when = f"trips in {display.duration(g['trips_in_s'])}"
    text = f"{g['gate']}: {display.gate_value(g)} of {display.amount(g['metric'], g['limit'])} · {when}"
    return f'<div class="gate">{meter(g["used"], text)} <span>{_e(text)}</span></div>'


def _live_panel(snap: dict) -> str:
    sessions = snap["sessions"]
    chart = hbars([(s["session_key"] or s["session_id"], s["burn_usd_per_hour"],
                    display.burn(s))
                   for s in sessions if s["burn_usd_per_hour"]],
                  "burn rate per session", f"no spend in the last {snap['window_s'] // 60} minutes",
                  color=PALETTE[3])
    rows = []
    for s in sessions:
        gates = "".join(_gate_cell(g) for g in s["gates"]) or '<span class="muted">no gates configured</span>'
        burn = display.burn(s)
        pace = display.tokens(s["tokens_per_minute"]) if s["tokens_per_minute"] else display.DASH
        who = f'{_e(s["session_key"] or s["session_id"])}<br><small class="muted">{_e(s["agent_id"] or "-")}</small>'
        rows.append(_tr([who, _e(display.cost(s["cost_usd"], s["unpriced_calls"])), _e(burn), _e(pace)], {1, 2, 3}) +
                    f'<tr class="gates"><td colspan="4">{gates}</td></tr>')
    table = _table(["session", "cost", "burn", "tokens/min"], rows, {1, 2, 3}, "live") if rows else \
        '<p class="muted">no sessions yet</p>'
    return _panel("live", f"Latest sessions: burn over the last {snap['window_s'] // 60} minutes and gates",
                  chart, table)


def _ingest_panel(snap: dict) -> str:
    sources = snap["ingest"]
    chart = hbars([(s["source"], s["lines_indexed"], f"{s['lines_indexed']:,} lines, {s['lines_rejected']:,} rejected")
                   for s in sources], "lines indexed per source", "no files tailed yet")
    rows = [_tr([_e(s["source"]), _e(s["files_tailed"]), _e(f"{s['lines_indexed']:,}"),
                 _e(f"{s['lines_rejected']:,}"), _e(f"{s['unread_bytes']:,}"), _e(display.duration(s["lag_s"]))],
                {1, 2, 3, 4, 5}) for s in sources]
    return _panel("ingest", "Ingest health", chart,
                  _table(["source", "files", "lines", "rejected", "unread bytes", "lag"], rows,
                         {1, 2, 3, 4, 5}) if rows else "")


def _problems(problems: list[dict]) -> str:
    listing = "".join(f'<li><time>{_e(p["at"] or "")}</time> {_e(p["kind"])} {_e(p["name"] or "?")} '
                      f'<b>{_e(p["status"])}</b> in {_e(p["session_key"] or "?")}</li>' for p in problems)
    return f'<h3>Latest failed or interrupted</h3><ul class="problems">{listing}</ul>' if problems else ""


PARAMS = ("days", "until", "tz", "refresh")


def page(conn: apsw.Connection, gates: Sequence[GateConfig], zone: ZoneInfo, now_ms: int,
         params: dict[str, list[str]]) -> str:
    """The whole page; ``params`` from the query string (PARAMS): ``days``, ``until`` (a date), ``tz``,
    ``refresh``. ``zone`` is the one the gates' days start in: ``tz`` cuts the charts' days, never the gates'."""
    try:
        local = queries.zone(_param(params, "tz") or zone.key)
    except ValueError as exc:
        raise BadParam(str(exc)) from None
    refresh = whole(_param(params, "refresh") or "15", "refresh", 0, REFRESH_MAX)
    days = _days(params, local, now_ms)
    window = queries.Window(since=_ms(days[0], local), until=_end_ms(days[-1], local))
    snap = overview(conn, gates, zone, now_ms, problems_since=window.since, problems_until=window.until)
    daily = queries.daily_costs_by_model(conn, window, local)
    totals: dict[str, float] = {}
    unpriced: dict[str, int] = {}
    for r in daily:
        totals[r["model"] or "?"] = totals.get(r["model"] or "?", 0.0) + r["cost_usd"]
        unpriced[r["model"] or "?"] = unpriced.get(r["model"] or "?", 0) + r["unpriced_calls"]
    ranked = sorted(totals, key=lambda m: -totals[m])
    colors = dict(zip(ranked, PALETTE[:-1]))  # the rest share the last color
    entries = [(colors[m], m, totals[m], unpriced[m]) for m in ranked[:len(colors)]]
    if len(ranked) > len(colors):
        rest = ranked[len(colors):]
        entries.append((PALETTE[-1], OTHER, sum(totals[m] for m in rest), sum(unpriced[m] for m in rest)))
    legend = "".join(f'<li><i style="background:{c}"></i>{_e(m)} {_e(display.cost(v, n))}</li>'
                     for c, m, v, n in entries)
    spent = sum(totals.values())
    top_sessions = queries.costs(conn, queries.Window(since=window.since, until=window.until, limit=10), "session")
    tools = sorted(queries.tools(conn, window), key=lambda t: -t["calls"])[:10]
    span = f"{days[0].isoformat()} to {days[-1].isoformat()}"
    worst = max((t["error_rate"] for t in tools), default=0.0)
    panels = [
        _panel("spend", f"Spend per day by model, {span} ({local})", stacked_days(daily, days, colors),
               f'<ul class="legend">{legend}</ul>'),
        _panel("sessions", f"Top sessions by cost, {span}",
               hbars([(s["session_key"] or s["session_id"], s["cost_usd"],
                       display.cost(s["cost_usd"], s["unpriced_calls"])) for s in top_sessions],
                     "top sessions by cost", "no sessions in these days")),
        _panel("tools", f"Tool error rates, {span}",
               hbars([(t["tool"] or "?", t["error_rate"], f"{t['errors']:,}/{t['calls']:,} ({t['error_rate']:.1%})")
                      for t in tools], "tool error rates", "no tool calls in these days", color=PALETTE[3],
                     scale=max(worst, 0.05)), _problems(snap["problems"])),
        _live_panel(snap),
        _ingest_panel(snap),
    ]
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    # Any cost marked for unpriced calls leaves some of them out of the total in all too.
    note = f'<p class="muted" id="unpriced">{_e(display.UNPRICED_NOTE)}</p>' if snap["total_unpriced_calls"] else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">{meta}
<link rel="icon" href="data:,">
<title>agentledger</title>
<style>{_STYLE}</style></head>
<body><header><h1>agentledger</h1>
<dl class="totals"><div><dt>spent in all</dt>
<dd id="total">{_e(display.cost(snap["total_usd"], snap["total_unpriced_calls"]))}</dd></div>
<div><dt>{_e(span)}</dt><dd id="window-total">{_e(display.cost(spent, sum(unpriced.values())))}</dd></div>
<div><dt>today ({_e(snap["timezone"])})</dt>
<dd id="today">{_e(display.cost(snap["today_usd"], snap["today_unpriced_calls"]))}</dd></div></dl>
{note}<p class="muted">as of {_e(snap["at"])} · agentledger {_e(__version__)}</p></header>
<main>{"".join(panels)}</main></body></html>
"""


_STYLE = """
:root { --fg: #1d2330; --muted: #6b7280; --bg: #f6f7f9; --card: #fff; --line: #e3e6ea; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e8eb; --muted: #9aa3ae; --bg: #14171c; --card: #1d2129; --line: #2d333d; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.4 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header { padding: 12px 16px 0; }
h1 { margin: 0 0 6px; font-size: 20px; }
h2 { margin: 0 0 8px; font-size: 16px; }
h3 { margin: 12px 0 4px; font-size: 14px; }
.totals { display: flex; flex-wrap: wrap; gap: 8px 24px; margin: 0; }
.totals dt { color: var(--muted); font-size: 13px; }
.totals dd { margin: 0; font-size: 22px; font-weight: 600; }
main { display: grid; gap: 12px; padding: 12px 16px 24px;
       grid-template-columns: repeat(auto-fit, minmax(min(100%, 560px), 1fr)); }
.panel { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px; min-width: 0; }
svg.chart { width: 100%; height: auto; display: block; }
svg.bars { max-width: 440px; }
svg text { fill: var(--fg); font-size: 12px; }
svg .axis, svg .muted { fill: var(--muted); font-size: 11px; }
svg .grid { stroke: var(--line); }
svg .track { fill: var(--line); }
svg.meter { width: 120px; height: 14px; vertical-align: middle; }
.muted { color: var(--muted); }
.legend { list-style: none; padding: 0; margin: 6px 0 0; display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 13px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 5px; border-radius: 2px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 13px; margin-top: 8px; }
th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid var(--line); vertical-align: top; }
th.num, td.num { text-align: right; white-space: nowrap; }
.gate { display: inline-block; margin: 0 16px 2px 0; font-size: 12px; }
table.live td { border-bottom: 0; }
table.live tr.gates td { border-bottom: 1px solid var(--line); padding-top: 0; }
td { overflow-wrap: anywhere; }
.problems { margin: 0; padding-left: 18px; font-size: 13px; overflow-wrap: anywhere; }
"""
