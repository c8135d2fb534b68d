"""Every read the CLI and HTTP make, over a read-only connection, with bound parameters only."""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import zoneinfo
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import apsw
import orjson

from agentledger.ledger.verify import (FALLBACK_COLUMNS, FALLBACK_SUMS, LLM_COLUMNS, LLM_ROW_SUMS, RUN_COLUMNS,
                                      RUN_ROW_SUMS, RUN_SNAPSHOT, SUBAGENT_KEY, TOOL_RUNS,
                                      TOOL_SESSION, UNPRICED, snapshot_fallback, snapshot_unpriced)
from agentledger.shown import printable
from agentledger.timeutil import LATEST_MS, iso
from agentledger.units import PICO_PER_USD

_TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens")
MAX_LIMIT = 2**63 - 1  # SQLite's integers, LIMIT's included, are 64-bit


@dataclass(frozen=True, slots=True)
class Window:
    """Filters shared by queries: [since, until] inclusive, in ms; agent; row limit."""

    since: int | None = None
    until: int | None = None
    agent: str | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        # An empty window would answer "nothing happened", which reads as a believable zero.
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since is after until: give a since at or before the until")


def _usd(pico: int | None) -> float:
    return round((pico or 0) / PICO_PER_USD, 12)


def _row(fields: tuple[str, ...], values: tuple) -> dict:
    """A result row: its keys are named once, in a tuple that is also the header of a CSV with no rows."""
    return dict(zip(fields, values, strict=True))


# Runs that produced no per-call cost fall back to the run-total cost of their usage snapshot (see
# verify.SNAPSHOT_OWNER). CROSS JOIN keeps SQLite walking from the (small) list of such runs, never the snapshots.
_SNAPSHOT_FALLBACK = snapshot_fallback("runs_without_calls AS w CROSS JOIN runs AS r ON r.run_id = w.run_id")

_SLOT = 900_000
_SLOT_LLM_SUMS = ", ".join(f"coalesce(sum({c}), 0)" for c in LLM_COLUMNS)
_SLOT_RUN_SUMS = ", ".join(f"coalesce(sum({c}), 0)" for c in RUN_COLUMNS)


_DAY = 86_400_000


@dataclass(frozen=True, slots=True)
class _Part:
    """A piece of a query window: whole days or whole 15-minute slots (read from rollups), or the
    partial slots at its edges (read from rows). ``lo``/``hi`` are inclusive: bucket starts for
    days and slots, milliseconds for rows."""

    level: str  # "days" | "slots" | "rows"
    lo: int | None
    hi: int | None


def _slot_plan(since: int | None, until: int | None) -> list[_Part]:
    lo = None if since is None else -(-since // _SLOT) * _SLOT
    hi = None if until is None else (until + 1) // _SLOT * _SLOT - _SLOT
    if lo is not None and hi is not None and lo > hi:
        return [_Part("rows", since, until)]
    parts = [_Part("slots", lo, hi)]
    if since is not None and since < lo:
        parts.append(_Part("rows", since, lo - 1))
    if until is not None and until >= hi + _SLOT:
        parts.append(_Part("rows", hi + _SLOT, until))
    return parts


def _plan(w: Window, *, days: bool = True) -> list[_Part]:
    """Whole UTC days first, then slots for partial days, then rows for partial slots."""
    since, until = w.since, w.until
    if days:
        lo = None if since is None else -(-since // _DAY) * _DAY
        hi = None if until is None else (until + 1) // _DAY * _DAY - _DAY
        if lo is None or hi is None or lo <= hi:
            parts = [_Part("days", lo, hi)]
            if since is not None and since < lo:
                parts += _slot_plan(since, lo - 1)
            if until is not None and until >= hi + _DAY:
                parts += _slot_plan(hi + _DAY, until)
            return parts
    return _slot_plan(since, until)


def _between(column: str, lo: int | None, hi: int | None, params: list) -> str:
    parts = []
    if lo is not None:
        parts.append(f"{column} >= ?")
        params.append(lo)
    if hi is not None:
        parts.append(f"{column} <= ?")
        params.append(hi)
    return " AND ".join(parts) or "1"


def _agent(column: str, w: Window, params: list) -> str:
    if w.agent is None:
        return ""
    params.append(w.agent)
    return f" AND {column} = ?"


def _limit(w: Window, params: list) -> str:
    if w.limit is None:
        return ""
    params.append(w.limit)
    return "LIMIT ?"


def _add(a: list, b: tuple) -> list:
    return [x + y for x, y in zip(a, b)]


@dataclass(frozen=True, slots=True)
class _Measure:
    """Sums a rollup keeps, and how to compute the same sums from the rows it summarises."""

    rollup_sums: str
    base: str
    base_sums: str
    base_time: str


def _windowed(conn: apsw.Connection, w: Window, rollup: str, measures: list[_Measure]) -> list[list[int]]:
    """Sums over a window: ``{rollup}_days`` and ``_slots`` where whole (one query for every measure),
    each measure's rows at the edges."""
    totals = [None] * len(measures)

    def absorb(i: int, row: tuple) -> None:
        totals[i] = list(row) if totals[i] is None else _add(totals[i], row)

    for part in _plan(w):
        if part.level == "rows":
            for i, m in enumerate(measures):
                params: list = []
                cond = _between(m.base_time, part.lo, part.hi, params) + _agent("agent_id", w, params)
                absorb(i, conn.execute(f"SELECT {m.base_sums} FROM {m.base} WHERE {cond}", params).fetchall()[0])
            continue
        params = []
        cond = _between("slot_ms", part.lo, part.hi, params) + _agent("agent_id", w, params)
        row = conn.execute(f"SELECT {', '.join(m.rollup_sums for m in measures)} FROM {rollup}_{part.level} "
                           f"WHERE {cond}", params).fetchall()[0]
        at = 0
        for i, m in enumerate(measures):
            width = m.rollup_sums.count("sum(")
            absorb(i, row[at:at + width])
            at += width
    return totals


_USAGE_MEASURES = [
    _Measure(_SLOT_LLM_SUMS, "llm_calls", LLM_ROW_SUMS, "ts_ms"),
    _Measure(_SLOT_RUN_SUMS, "runs", RUN_ROW_SUMS, "coalesce(started_ms, ended_ms)"),
    _Measure("coalesce(sum(sessions), 0), coalesce(sum(subagent_sessions), 0)", "sessions",
             f"coalesce(sum(NOT {SUBAGENT_KEY}), 0), coalesce(sum({SUBAGENT_KEY}), 0)",
             "coalesce(started_ms, first_ms)"),
    _Measure("coalesce(sum(compactions), 0)", "(SELECT * FROM compactions WHERE phase = 'start')", "count(*)",
             "ts_ms"),
    _Measure("coalesce(sum(subagents), 0)", "(SELECT *, child_agent_id AS agent_id FROM subagents)", "count(*)",
             "coalesce(spawned_ms, ended_ms)"),
]
_TOOL_MEASURES = [
    _Measure("coalesce(sum(calls), 0), coalesce(sum(errors), 0)", "tool_calls",
             "count(*), coalesce(sum(status = 'error'), 0)", "coalesce(started_ms, ended_ms)"),
]


def _fallback_groups(conn: apsw.Connection, w: Window, keys: list[str]) -> dict[tuple, list[int]]:
    """Snapshot tokens and costs (FALLBACK_COLUMNS) of runs without per-call costs, grouped by ``keys``:
    expressions over the fallback's columns, which bear the names llm_calls gives the same things (none:
    one row, keyed ``()``)."""
    params: list = []
    cond = _between("ts_ms", w.since, w.until, params) + _agent("agent_id", w, params)
    group = f" GROUP BY {', '.join(str(i + 1) for i in range(len(keys)))}" if keys else ""
    rows = conn.execute(
        f"SELECT {', '.join([*keys, FALLBACK_SUMS])} FROM ({_SNAPSHOT_FALLBACK}) WHERE {cond}{group}", params)
    width = len(FALLBACK_COLUMNS)
    return {tuple(row[:-width]): list(row[-width:]) for row in rows}


# The writer keeps every session's fallback by provider and model (session_fallback_costs): a session's
# whole history is read there, not worked out again from its runs on every commit's hot views.
_SESSION_FALLBACKS = f"SELECT {{keys}}, {FALLBACK_SUMS} FROM session_fallback_costs {{where}} GROUP BY {{keys}}"
_OF_SESSIONS = "WHERE session_id IN (SELECT value FROM json_each(?))"


def _session_fallbacks(conn: apsw.Connection, session_ids, keys: str = "session_id") -> dict[object, list[int]]:
    """These sessions' (None: every session's) snapshot fallback tokens and costs (FALLBACK_COLUMNS) over their
    whole history, by ``keys`` (columns of session_fallback_costs: session_id, provider, model; '' for an
    unknown provider or model)."""
    if session_ids is None:
        rows = conn.execute(_SESSION_FALLBACKS.format(keys=keys, where=""))
    else:
        rows = conn.execute(_SESSION_FALLBACKS.format(keys=keys, where=_OF_SESSIONS), (_json_list(session_ids),))
    width = len(FALLBACK_COLUMNS)
    return {row[0] if len(row) == width + 1 else tuple(row[:-width]): list(row[-width:]) for row in rows}


_FALLBACK_AT = LLM_COLUMNS.index(FALLBACK_COLUMNS[0])
_FALLBACK_COST = FALLBACK_COLUMNS.index("cost_pico")
_FALLBACK_UNPRICED = FALLBACK_COLUMNS.index("unpriced_calls")


def _fallback_cost(vals: list[int] | None) -> tuple[int, int]:
    """A session's snapshot fallback's cost and the unpriced calls it counts ((0, 0) for none)."""
    return (0, 0) if vals is None else (vals[_FALLBACK_COST], vals[_FALLBACK_UNPRICED])


def _plus_fallback(vals: list[int], fallback: list[int]) -> list[int]:
    """LLM sums (LLM_COLUMNS) with a snapshot fallback's tokens and cost added where they keep the same."""
    end = _FALLBACK_AT + len(fallback)
    return [*vals[:_FALLBACK_AT], *_add(vals[_FALLBACK_AT:end], fallback), *vals[end:]]


def _with_fallback(groups: dict, fallback: dict) -> dict:
    """LLM sums by key (LLM_COLUMNS each) with the snapshot fallbacks of the same keys added: runs without
    model calls count what their snapshot says, as in ``usage``, so every grouping adds up to it."""
    for key, vals in fallback.items():
        groups[key] = _plus_fallback(groups.get(key, [0] * len(LLM_COLUMNS)), vals)
    return groups


def _window_fallbacks(conn: apsw.Connection, w: Window) -> dict[str | None, list[int]]:
    """Snapshot tokens and costs of runs without per-call costs in the window, by session."""
    return {sid: vals for (sid,), vals in _fallback_groups(conn, w, ["session_id"]).items()}


def _fallback_total(conn: apsw.Connection, w: Window) -> list[int]:
    """Snapshot tokens and costs of runs without per-call costs in the window, summed."""
    return _fallback_groups(conn, w, [])[()]


# How often a session was suspended, for how long in all before it came back, and since when it
# is away now (each a walk of its few suspension rows).
_SUSPENSIONS = """
    (SELECT count(*) FROM session_suspensions AS p WHERE p.session_id = s.session_id),
    (SELECT coalesce(sum(p.until_ms - p.from_ms), 0) FROM session_suspensions AS p
     WHERE p.session_id = s.session_id AND p.until_ms IS NOT NULL),
    (SELECT max(p.from_ms) FROM session_suspensions AS p WHERE p.session_id = s.session_id AND p.until_ms IS NULL)"""


SESSION_FIELDS = ("session_key", "session_id", "agent_id", "source", "status", "started_at", "ended_at",
                  "first_activity_at", "last_activity_at", "duration_s", "is_subagent", "runs", "llm_calls",
                  "llm_errors", "tool_calls", "tool_errors", "input_tokens", "output_tokens", "cache_read_tokens",
                  "cache_write_tokens", "total_tokens", "cost_usd", "unpriced_calls", "end_reason", "resumed_from",
                  "message_count", "reported_duration_ms", "suspensions", "suspended_s", "suspended_since")


def sessions(conn: apsw.Connection, w: Window, *, session_ids: list[str] | None = None) -> list[dict]:
    """Sessions active in the window (or exactly ``session_ids``), most recent first."""
    params: list = []
    cond = _between("s.last_ms", w.since, None, params) + " AND " + _between("s.first_ms", None, w.until, params)
    cond += _agent("s.agent_id", w, params)
    if session_ids is not None:
        cond += " AND s.session_id IN (SELECT value FROM json_each(?))"
        params.append(_json_list(session_ids))
    limit = _limit(w, params)
    sql = f"""
    SELECT s.session_key, s.session_id, s.agent_id, s.source, s.status, coalesce(s.started_ms, s.first_ms),
           s.ended_ms, s.first_ms, s.last_ms, {SUBAGENT_KEY},
           coalesce(t.runs, 0), coalesce(t.llm_calls, 0) - coalesce(t.llm_errors, 0), coalesce(t.llm_errors, 0),
           coalesce(t.tool_calls, 0), coalesce(t.tool_errors, 0), coalesce(t.input_tokens, 0),
           coalesce(t.output_tokens, 0), coalesce(t.cache_read_tokens, 0), coalesce(t.cache_write_tokens, 0),
           coalesce(t.total_tokens, 0), coalesce(t.cost_pico, 0), coalesce(t.unpriced_calls, 0),
           s.end_reason, s.resumed_from, s.message_count, s.duration_ms, {_SUSPENSIONS}
    FROM sessions AS s LEFT JOIN session_totals AS t ON t.session_id = s.session_id
    WHERE {cond}
    ORDER BY s.last_ms DESC, s.session_id
    {limit}
    """
    rows = conn.execute(sql, params).fetchall()
    fallback = _session_fallbacks(conn, [r[1] for r in rows]) if rows else {}
    none = [0] * len(FALLBACK_COLUMNS)
    out = []
    for (key, sid, agent, source, status, started, ended, first, last, is_sub, runs, llm, llm_err, tools,
         tool_err, *spent, reason, resumed, messages, reported, suspensions, away, since) in rows:
        i, o, cr, cw, t, cost, unpriced = _add(spent, fallback.get(sid, none))
        out.append(_row(SESSION_FIELDS, (
            key, sid, agent, source, status, iso(started), iso(ended), iso(first), iso(last),
            round((last - first) / 1000, 3), bool(is_sub), runs, llm, llm_err, tools, tool_err, i, o, cr, cw, t,
            _usd(cost), unpriced, reason, resumed, messages, reported, suspensions,
            round(away / 1000, 3), iso(since))))
    return out


def usage(conn: apsw.Connection, w: Window) -> dict:
    llm, runs, (sess, sub_sess), (compactions,), (subagents,) = _windowed(conn, w, "usage", _USAGE_MEASURES)
    (tools,) = _windowed(conn, w, "tool", _TOOL_MEASURES)
    llm = _plus_fallback(llm, _fallback_total(conn, w))
    # A line that could not be read names no agent: for one agent their number is unknown. A reject's
    # only time is when it was read.
    rejected = None
    if w.agent is None:
        params: list = []
        rejected = conn.execute(f"SELECT count(*) FROM rejects WHERE {_between('ts_ms', w.since, w.until, params)}",
                                params).fetchall()[0][0]
    calls, errors, i, o, cr, cw, t, cost, unpriced = llm
    return {
        "sessions": sess, "subagent_sessions": sub_sess, "runs": runs[0], "interrupted_runs": runs[4],
        "open_runs": runs[1], "failed_runs": runs[3],
        "llm_calls": calls - errors, "llm_errors": errors, "tool_calls": tools[0], "tool_errors": tools[1],
        "subagents": subagents, "compactions": compactions, "rejected_lines": rejected,
        "unpriced_calls": unpriced,
        "input_tokens": i, "output_tokens": o, "cache_read_tokens": cr, "cache_write_tokens": cw,
        "total_tokens": t, "cost_usd": _usd(cost),
    }


GROUP_BY = ("model", "provider", "agent", "session", "day", "tool")


def cost_fields(group_by: str) -> tuple[str, ...]:
    """The keys of a ``costs`` row grouped so."""
    if group_by == "tool":
        return TOOL_COST_FIELDS
    if group_by == "session":  # a row is a session instance
        return ("session_key", "session_id", *_LLM_FIELDS)
    return ({"agent": "agent_id"}.get(group_by, group_by), *_LLM_FIELDS)


def costs(conn: apsw.Connection, w: Window, group_by: str, local: dt.tzinfo = dt.timezone.utc) -> list[dict]:
    """Spend grouped by one dimension; rows by cost, most first (days in order, in ``local``: see ``zone``)."""
    if group_by not in GROUP_BY:
        raise ValueError(f"cannot group by {group_by!r}: choose one of {', '.join(GROUP_BY)}")
    if group_by == "tool":
        return _tool_costs(conn, w)
    if group_by == "session":
        out = [r for r in _session_costs(conn, w)
               if r["llm_calls"] or r["llm_errors"] or r["total_tokens"] or r["cost_usd"]]
        out.sort(key=lambda r: (-r["cost_usd"], str(r["session_key"]), str(r["session_id"])))
        return out[: w.limit] if w.limit else out
    dims = {"model": ("model", "coalesce(model, '')"), "provider": ("provider", "coalesce(provider, '')"),
            "agent": ("agent_id", "coalesce(agent_id, '')"), "day": ("slot_ms", f"ts_ms - ts_ms % {_SLOT}")}
    groups = _llm_groups(conn, w, [dims[group_by]], local, by_day=group_by == "day")
    if group_by == "day":
        groups = _by_local_day(groups, local)
    fields = cost_fields(group_by)
    label = fields[0]
    out = []
    for (key,), vals in groups.items():
        calls, _errors, *_kinds, tokens, cost, _unpriced = vals
        if not (calls or tokens or cost):
            continue  # slots that only count sessions or compactions
        out.append(_row(fields, (key if key != "" else None, *_llm_values(vals))))
    if group_by == "day":
        out.sort(key=lambda r: r["day"])
    else:
        out.sort(key=lambda r: (-r["cost_usd"], str(r[label])))
    return out[: w.limit] if w.limit else out


def cost_total(rows: list[dict], group_by: str) -> dict:
    """The grand total of a ``costs`` grouping's rows (pass every row of the window, not those a limit
    shows): ``groups``, how many rows there are, then each value a row holds, summed. A tool's time is the
    sum of the times known, null when none is; costs are added in whole pico-dollars, so no float error
    accumulates over the rows (a row's own float holds some 15 digits: above $1,000 its last pico-dollars)."""
    if group_by == "tool":
        known = [r["duration_s"] for r in rows if r["duration_s"] is not None]
        return {"groups": len(rows), "calls": sum(r["calls"] for r in rows), "errors": sum(r["errors"] for r in rows),
                "duration_s": round(sum(known), 3) if known else None}
    total: dict = {"groups": len(rows)}
    for key in _LLM_FIELDS:
        total[key] = sum(r[key] for r in rows) if key != "cost_usd" else \
            _usd(sum(round(r["cost_usd"] * PICO_PER_USD) for r in rows))
    return total


def costs_report(conn: apsw.Connection, w: Window, group_by: str, local: dt.tzinfo = dt.timezone.utc) -> dict:
    """``costs`` as scripts read it (``--json``, ``GET /v1/costs``): the grouping, its rows (at most
    ``w.limit``) and the window's grand total, which the limit does not cut."""
    every = costs(conn, replace(w, limit=None), group_by, local)
    return {"group_by": group_by, "rows": every[: w.limit] if w.limit else every,
            "total": cost_total(every, group_by)}


def _session_costs(conn: apsw.Connection, w: Window) -> list[dict]:
    """Spend by session instance: its whole-life totals when nothing narrows the window, else what the
    window's model calls and snapshot fallbacks add up to (no rollup is kept by session and time)."""
    fields = cost_fields("session")
    if w.since is None and w.until is None and w.agent is None:
        return [{k: r[k] for k in fields} for r in sessions(conn, Window())]
    params: list = []
    cond = _between("ts_ms", w.since, w.until, params) + _agent("agent_id", w, params)
    groups = _with_fallback({sid: list(vals) for sid, *vals in conn.execute(
        f"SELECT session_id, {LLM_ROW_SUMS} FROM llm_calls WHERE {cond} GROUP BY 1", params)},
        _window_fallbacks(conn, w))
    keys = dict(conn.execute("SELECT session_id, session_key FROM sessions WHERE session_id IN "
                             "(SELECT value FROM json_each(?))", (_json_list(groups),)))
    return [_row(fields, (keys.get(sid), sid, *_llm_values(vals))) for sid, vals in groups.items()]


def _llm_groups(conn: apsw.Connection, w: Window, dims: list[tuple[str, str]], local: dt.tzinfo,
                by_day: bool) -> dict[tuple, list[int]]:
    """LLM sums over a window grouped by ``dims`` (each a rollup column and the same from the rows);
    ``by_day`` groups by slot first: local days in another zone do not line up with UTC days."""
    days = not by_day or local is dt.timezone.utc
    groups: dict[tuple, list[int]] = {}
    width = len(dims)
    keys = ", ".join(str(i + 1) for i in range(width))
    for part in _plan(w, days=days):
        params: list = []
        if part.level == "rows":
            cond = _between("ts_ms", part.lo, part.hi, params) + _agent("agent_id", w, params)
            sql = f"SELECT {', '.join(b for _, b in dims)}, {LLM_ROW_SUMS} FROM llm_calls WHERE {cond} GROUP BY {keys}"
        else:
            cond = _between("slot_ms", part.lo, part.hi, params) + _agent("agent_id", w, params)
            sql = (f"SELECT {', '.join(c for c, _ in dims)}, {_SLOT_LLM_SUMS} FROM usage_{part.level} "
                   f"WHERE {cond} GROUP BY {keys}")
        for row in conn.execute(sql, params):
            key, vals = tuple(row[:width]), row[width:]
            acc = groups.get(key)
            groups[key] = list(vals) if acc is None else _add(acc, vals)
    return _with_fallback(groups, _fallback_groups(conn, w, [b for _, b in dims]))


def daily_costs_by_model(conn: apsw.Connection, w: Window, local: dt.tzinfo = dt.timezone.utc) -> list[dict]:
    """Spend per local day and model (what a chart stacks), days in order, models by cost within a day."""
    groups = _llm_groups(conn, w, [("slot_ms", f"ts_ms - ts_ms % {_SLOT}"), ("model", "coalesce(model, '')")],
                         local, by_day=True)
    days = _by_local_day(groups, local)
    out = [{"day": day, "model": model or None, "llm_calls": calls - errors, "total_tokens": t,
            "cost_usd": _usd(cost), "unpriced_calls": unpriced}
           for (day, model), (calls, errors, _i, _o, _cr, _cw, t, cost, unpriced) in days.items() if calls or t or cost]
    out.sort(key=lambda r: (r["day"], -r["cost_usd"], str(r["model"])))
    return out


def _percentiles(values: list[int]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    import numpy as np  # here: a third of every query command's start-up, for one report

    return tuple(np.percentile(np.asarray(values, dtype=np.float64), [50, 95, 99]).round(1).tolist())


def model_latency(conn: apsw.Connection, w: Window) -> dict[str, tuple]:
    """p50/p95/p99 of model-call durations by model, from the rows (on demand: scans the window)."""
    durations = _durations(conn, w, "llm_calls", "model", "ts_ms")
    return {model: _percentiles(values) for model, values in durations.items()}


def _durations(conn: apsw.Connection, w: Window, table: str, name: str, time: str) -> dict[str, list[int]]:
    """Reported durations in the window, by name (column names are literals from this module)."""
    params: list = []
    cond = _between(time, w.since, w.until, params) + _agent("agent_id", w, params)
    out: dict[str, list[int]] = {}
    for key, duration in conn.execute(
            f"SELECT coalesce({name}, ''), duration_ms FROM {table} WHERE {cond} AND duration_ms IS NOT NULL",
            params):
        out.setdefault(key, []).append(duration)
    return out


def _by_local_day(groups: dict[tuple, list[int]], local: dt.tzinfo) -> dict[tuple, list[int]]:
    """Groups keyed (slot, ...) summed into groups keyed (local day, ...)."""
    days: dict = {}
    for (slot_ms, *rest), vals in groups.items():
        try:
            day = dt.datetime.fromtimestamp(slot_ms / 1000, tz=local).date()
        except (OverflowError, ValueError):  # 9999-12-31 UTC is the next year east of it: the last day there is
            day = dt.date.max
        key = (day.isoformat(), *rest)
        acc = days.get(key)
        days[key] = list(vals) if acc is None else _add(acc, vals)
    return days


def zone(tz: str) -> dt.tzinfo:
    """The zone days are counted in; UTC's days are the rollups' own, read whole rather than summed from slots."""
    if tz.upper() == "UTC":
        return dt.timezone.utc
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {tz!r}: use an IANA name such as Europe/Berlin or UTC") from None


TOOL_COST_FIELDS = ("tool", "calls", "errors", "duration_s")


def _tool_costs(conn: apsw.Connection, w: Window) -> list[dict]:
    """Tools carry no cost of their own: calls, errors and time spent, by tool (the time of the calls that
    reported one: null when none did, as no transcript does)."""
    groups: dict = {}
    for part in _plan(w):
        params: list = []
        if part.level == "rows":
            cond = _between("coalesce(started_ms, ended_ms)", part.lo, part.hi, params) + _agent("agent_id", w,
                                                                                                  params)
            sql = ("SELECT coalesce(tool_name, ''), count(*), sum(status = 'error'), sum(coalesce(duration_ms, 0)), "
                   f"count(duration_ms) FROM tool_calls WHERE {cond} GROUP BY 1")
        else:
            cond = _between("slot_ms", part.lo, part.hi, params) + _agent("agent_id", w, params)
            sql = f"SELECT tool_name, sum(calls), sum(errors), sum(duration_ms), sum(timed_calls) " \
                  f"FROM tool_{part.level} WHERE {cond} GROUP BY 1"
        for name, *vals in conn.execute(sql, params):
            groups[name] = _add(groups.get(name, [0, 0, 0, 0]), vals)
    out = [_row(TOOL_COST_FIELDS, (name or None, c, e, round(d / 1000, 3) if timed else None))
           for name, (c, e, d, timed) in groups.items() if c]
    out.sort(key=lambda r: (-r["calls"], str(r["tool"])))
    return out[: w.limit] if w.limit else out


REJECT_FIELDS = ("path", "offset", "length", "reason", "head", "read_at")


def rejects(conn: apsw.Connection, w: Window) -> list[dict]:
    params: list = []
    cond = _between("r.ts_ms", w.since, w.until, params)
    limit = _limit(w, params)
    # Under the file's name now (a rotated or archived file's, as `events` and `inputs` give it): the
    # name it had when the line was read may be another file's since.
    rows = conn.execute(
        "SELECT coalesce(f.path, r.path) AS shown, r.offset, r.length, r.reason, r.head, r.ts_ms "
        f"FROM rejects AS r LEFT JOIN files AS f ON f.id = r.file_id WHERE {cond} ORDER BY shown, r.offset {limit}",
        params,
    )
    return [_row(REJECT_FIELDS, (path, off, length, reason, printable(bytes(head), 120), iso(ts)))
            for path, off, length, reason, head, ts in rows]


FILE_STATUS_FIELDS = ("source", "path", "status", "offset", "size", "lines", "lost_bytes", "updated_at", "reason")


def file_status(conn: apsw.Connection) -> list[dict]:
    """Every tailed file, and every file or directory that could not be read at the last look: status
    ``unreadable``, with the reason (a followed file keeps how far it was read)."""
    unreadable = {(s, p): (why, ts) for s, p, why, ts in conn.execute(
        "SELECT source, path, reason, since_ms FROM unreadable_inputs")}
    rows = [
        _row(FILE_STATUS_FIELDS, (s, p, st, off, size, lines, lost, iso(ts), None))
        for s, p, st, off, size, lines, lost, ts in conn.execute(
            "SELECT source, path, status, offset, size, lines, lost_bytes, updated_ms FROM files")
    ]
    for row in rows:
        why = unreadable.pop((row["source"], row["path"]), None)
        if why is not None:
            row["status"], row["reason"] = "unreadable", why[0]
    rows += [_row(FILE_STATUS_FIELDS, (s, p, "unreadable", None, None, None, None, iso(ts), why))
             for (s, p), (why, ts) in unreadable.items()]
    return sorted(rows, key=lambda row: (row["source"], row["path"]))


class NotFound(LookupError):
    """No session or run by that name."""


def _json_list(values) -> str:
    return orjson.dumps(list(values)).decode()


_LLM_FIELDS = ("llm_calls", "llm_errors", *_TOKEN_KEYS, "cost_usd", "unpriced_calls")


def _llm_values(vals) -> tuple:
    """LLM_COLUMNS sums as the values of _LLM_FIELDS: failed calls apart, cost in USD."""
    calls, errors, i, o, cr, cw, t, cost, unpriced = vals
    return calls - errors, errors, i, o, cr, cw, t, _usd(cost), unpriced


def _llm_dict(vals) -> dict:
    return _row(_LLM_FIELDS, _llm_values(vals))


# A run's model and provider as its start or end said them, else as its last model call did: a transcript's
# turn says them only at its end, which an interrupted turn never wrote.
_RUN_LAST_CALL = ("(SELECT c.{0} FROM llm_calls AS c WHERE c.run_id = r.run_id AND c.{0} IS NOT NULL "
                  "ORDER BY c.ts_ms DESC, c.id DESC LIMIT 1)")
# A run without model calls counts the tokens and cost of its usage snapshot ``f``, and one unpriced call when
# that has no cost, as it does in every total (verify.RUN_SNAPSHOT picks it).
_RUN_COLUMNS = f"""r.run_id, r.session_key, r.session_id, r.agent_id, coalesce(r.model, {_RUN_LAST_CALL.format("model")}),
    coalesce(r.provider, {_RUN_LAST_CALL.format("provider")}), r.status, r.started_ms,
    r.ended_ms, r.duration_ms, r.stop_reason, r.error, coalesce(t.tool_calls, 0), coalesce(t.tool_errors, 0),
    coalesce(l.llm_calls, 0), coalesce(l.llm_errors, 0), iif(f.id IS NULL, coalesce(l.total_tokens, 0), f.total_tokens),
    iif(f.id IS NULL, l.cost_pico, f.cost_pico) AS run_cost,
    iif(f.id IS NULL, coalesce(l.unpriced_calls, 0), {snapshot_unpriced("f")})"""
_RUN_FROM = f"""runs AS r LEFT JOIN run_tool_totals AS t ON t.run_id = r.run_id
    LEFT JOIN run_llm_totals AS l ON l.run_id = r.run_id
    LEFT JOIN usage_snapshots AS f
        ON f.id = iif(EXISTS (SELECT 1 FROM runs_without_calls AS w WHERE w.run_id = r.run_id),
                      {RUN_SNAPSHOT},
                      NULL)"""


RUN_FIELDS = ("run_id", "session_key", "session_id", "agent_id", "model", "provider", "status", "started_at",
              "ended_at", "duration_ms", "stop_reason", "error", "tool_calls", "tool_errors", "llm_calls", "llm_errors",
              "total_tokens", "cost_usd", "unpriced_calls")


def _run_dict(row) -> dict:
    (rid, key, sid, agent, model, provider, status, started, ended, duration, stop, error, tools, tool_err,
     llm, llm_err, tokens, cost, unpriced) = row
    return _row(RUN_FIELDS, (rid, key, sid, agent, model, provider, status, iso(started), iso(ended), duration, stop,
                             error, tools, tool_err, llm - llm_err, llm_err, tokens, _usd(cost), unpriced))


def runs(conn: apsw.Connection, w: Window, *, status: str | None = None) -> list[dict]:
    params: list = []
    cond = _between("coalesce(r.started_ms, r.ended_ms)", w.since, w.until, params) + _agent("r.agent_id", w, params)
    if status is not None:
        cond += " AND r.status = ?"
        params.append(status)
    limit = _limit(w, params)
    rows = conn.execute(f"SELECT {_RUN_COLUMNS} FROM {_RUN_FROM} WHERE {cond} "
                        f"ORDER BY coalesce(r.started_ms, r.ended_ms) DESC {limit}", params)
    return [_run_dict(row) for row in rows]


_TOOL_COLUMNS = """tc.run_id, tc.tool_call_id, tc.tool_name, tc.agent_id, tc.session_key, tc.status, tc.started_ms,
    tc.ended_ms, tc.duration_ms, tc.error, tc.file_path"""


TOOL_CALL_FIELDS = ("run_id", "tool_call_id", "tool_name", "agent_id", "session_key", "status", "started_at",
                    "ended_at", "duration_ms", "error", "file_path")


def _tool_dict(row) -> dict:
    rid, cid, name, agent, key, status, started, ended, duration, error, path = row
    return _row(TOOL_CALL_FIELDS, (rid or None, cid, name, agent, key, status, iso(started), iso(ended), duration,
                                   error, path))


def run_detail(conn: apsw.Connection, run_id: str) -> dict:
    row = conn.execute(f"SELECT {_RUN_COLUMNS} FROM {_RUN_FROM} WHERE r.run_id = ?", (run_id,)).fetchall()
    if not row:
        raise NotFound(f"no run {run_id!r}")
    out = _run_dict(row[0])
    usage = conn.execute("SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, total_tokens "
                         "FROM runs WHERE run_id = ?", (run_id,)).fetchall()[0]
    out["reported_usage"] = dict(zip(_TOKEN_KEYS, usage)) if usage[4] is not None else None
    out["tool_calls_list"] = [_tool_dict(r) for r in conn.execute(
        f"SELECT {_TOOL_COLUMNS} FROM tool_calls AS tc WHERE tc.run_id = ? ORDER BY coalesce(tc.started_ms, "
        "tc.ended_ms)", (run_id,))]
    out["model_calls"] = [
        {"at": iso(ts), "call_index": idx, "provider": p, "model": m, "input_tokens": i, "output_tokens": o,
         "cache_read_tokens": cr, "cache_write_tokens": cw, "total_tokens": t,
         "cost_usd": None if c is None else _usd(c), "unpriced_calls": u, "duration_ms": d, "error": e}
        for ts, idx, p, m, i, o, cr, cw, t, c, u, d, e in conn.execute(
            "SELECT ts_ms, call_index, provider, model, input_tokens, output_tokens, cache_read_tokens, "
            f"cache_write_tokens, total_tokens, cost_pico, {UNPRICED}, duration_ms, error FROM llm_calls "
            "WHERE run_id = ? ORDER BY ts_ms", (run_id,))]
    return out


def _session_ids(conn: apsw.Connection, key: str) -> tuple[list[str], bool]:
    """The session instances ``key`` names, and whether it named a whole key: a session key names
    every instance of it (each reset starts one), a session id that one instance alone."""
    ids = [r[0] for r in conn.execute("SELECT session_id FROM sessions WHERE session_key = ? ORDER BY first_ms",
                                      (key,))]
    if ids:
        return ids, True
    if conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (key,)).fetchall():
        return [key], False
    raise NotFound(f"no session {key!r} (give a session key or a session id)")


# The instances of each key (every session with that session key, or the keyless session with that
# id) with their totals. Two joins, not an OR, so each walks its own index; CROSS JOIN walks from the
# keys, never from every keyless session.
_KEY_TOTALS = """
SELECT i.key, i.session_id, coalesce(t.cost_pico, 0), coalesce(t.unpriced_calls, 0) FROM (
    SELECT j.value AS key, s.session_id FROM json_each(?1) AS j JOIN sessions AS s ON s.session_key = j.value
    UNION ALL
    SELECT j.value, s.session_id FROM json_each(?1) AS j CROSS JOIN sessions AS s ON s.session_id = j.value
    WHERE s.session_key IS NULL
) AS i LEFT JOIN session_totals AS t ON t.session_id = i.session_id
"""
# Who these keys spawned, and whom those spawned, at any depth; UNION walks a key once, so the cycle
# a malformed log may make ends. CROSS JOIN reads each parent's children by index, never every
# subagent in spawn order; ties in spawn time keep the order the spawns were stored in.
_SPAWNED = """
WITH RECURSIVE fam(k) AS (
    SELECT value FROM json_each(?)
    UNION
    SELECT a.child_session_key FROM fam JOIN subagents AS a ON a.parent_session_key = fam.k
)
SELECT a.parent_session_key, a.child_session_key, a.label
FROM fam CROSS JOIN subagents AS a ON a.parent_session_key = fam.k
ORDER BY a.spawned_ms, a.rowid
"""
_Spawned = dict[str, list[tuple[str, str | None]]]  # parent key → its children's (key, label)


def _own_costs(conn: apsw.Connection, keys: list[str]) -> dict[str, tuple[int, int]]:
    """Spend of every instance of each session key (or of the session with that id, when it has no
    key), snapshot fallbacks included, and the unpriced calls it leaves out; keys with no session left
    out. Two statements however many keys: a family of hundreds is read at once."""
    rows = conn.execute(_KEY_TOTALS, (_json_list(dict.fromkeys(keys)),)).fetchall()
    fallback = _session_fallbacks(conn, [sid for _, sid, _, _ in rows]) if rows else {}
    out: dict[str, tuple[int, int]] = {}
    for key, sid, cost, unpriced in rows:
        total, left_out = out.get(key, (0, 0))
        more, more_unpriced = _fallback_cost(fallback.get(sid))
        out[key] = (total + cost + more, left_out + unpriced + more_unpriced)
    return out


def _instances_cost(conn: apsw.Connection, ids: list[str]) -> tuple[int, int]:
    """Spend of these session instances, snapshot fallbacks included, and the unpriced calls it leaves out."""
    cost, unpriced = conn.execute(
        "SELECT coalesce(sum(cost_pico), 0), coalesce(sum(unpriced_calls), 0) FROM session_totals "
        "WHERE session_id IN (SELECT value FROM json_each(?))", (_json_list(ids),)).fetchall()[0]
    fallbacks = [_fallback_cost(vals) for vals in _session_fallbacks(conn, ids).values()]
    return cost + sum(c for c, _ in fallbacks), unpriced + sum(n for _, n in fallbacks)


def _spawned(conn: apsw.Connection, keys: list[str]) -> _Spawned:
    """The children (key, label) of these session keys and of all their descendants, by parent, in
    spawn order."""
    out: _Spawned = {}
    for parent, child, label in conn.execute(_SPAWNED, (_json_list(keys),)):
        out.setdefault(parent, []).append((child, label))
    return out


def _family_keys(roots: list[str], spawned: _Spawned) -> list[str]:
    return [*roots, *(child for children in spawned.values() for child, _ in children)]


def _reachable(root: str, spawned: _Spawned, outside: set[str] = frozenset()) -> list[str]:
    """The keys ``spawned`` holds under ``root`` at any depth, neither the root nor ``outside`` (a
    malformed log's cycle back to them ends there)."""
    seen, todo, found = {root, *outside}, [root], []
    while todo:
        for child, _ in spawned.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
                found.append(child)
    return found


def session_detail(conn: apsw.Connection, key: str) -> dict:
    """A session key's instances, or the one instance a session id names, with what they spent and
    did, and their subagents: a key's all, an instance's those it spawned (see ``_subagent_rows``)."""
    ids, whole_key = _session_ids(conn, key)
    id_list = _json_list(ids)
    instances = sessions(conn, Window(), session_ids=ids)
    keys = sorted({s["session_key"] for s in instances if s["session_key"]})
    models = _with_fallback({(p, m): vals for p, m, *vals in conn.execute(
        "SELECT provider, model, sum(llm_calls), sum(llm_errors), sum(input_tokens), sum(output_tokens), "
        "sum(cache_read_tokens), sum(cache_write_tokens), sum(total_tokens), sum(cost_pico), "
        "sum(unpriced_calls) FROM session_model_totals WHERE session_id IN (SELECT value FROM json_each(?)) "
        "GROUP BY 1, 2", (id_list,))},
        _session_fallbacks(conn, ids, "provider, model"))
    # A model all of whose calls here moved to a subagent's session (its side branch) leaves a row of zeros.
    by_model = sorted(({"provider": p or None, "model": m or None, **_llm_dict(vals)}
                       for (p, m), vals in models.items() if any(vals)),
                      key=lambda r: (-r["cost_usd"], r["provider"] or "", r["model"] or ""))
    run_rows = [_run_dict(r) for r in conn.execute(
        f"SELECT {_RUN_COLUMNS} FROM {_RUN_FROM} WHERE r.session_id IN (SELECT value FROM json_each(?)) "
        "ORDER BY coalesce(r.started_ms, r.ended_ms)", (id_list,))]
    tools = [_tool_dict(r) for r in _calls_of(conn, ids, sum(s["tool_calls"] for s in instances),
                                                _SESSION_TOOL_CALLS, _EVERY_TOOL_CALL_OF, f"ORDER BY {_TOOL_ORDER}")]
    child_rows = _subagent_rows(conn, Window(), keys, None if whole_key else ids)
    spawned = _spawned(conn, [r[0] for r in child_rows])
    costs = _own_costs(conn, _family_keys([r[0] for r in child_rows], spawned))
    children = _subagent_dicts(child_rows, costs)
    compactions = _compactions(conn, ids, keys)
    # In whole pico-dollars, as cost_total adds, from the sums by model (every instance's spend, snapshots of
    # runs without calls included): the instances' floats drift off the exact total, over $8,000 each alone.
    own = sum(vals[LLM_COLUMNS.index("cost_pico")] or 0 for vals in models.values())
    own_unpriced = sum(s["unpriced_calls"] for s in instances)
    kin = [_family_cost(c["child_session_key"], spawned, costs, set(keys)) for c in children]
    family = own + sum(cost for cost, _ in kin)
    return {"session_key": keys[0] if keys else None, "instances": instances,
            "cost_usd": _usd(own), "unpriced_calls": own_unpriced, "family_cost_usd": _usd(family),
            "family_unpriced_calls": own_unpriced + sum(n for _, n in kin), "cost_by_model": by_model,
            "runs": run_rows, "tool_calls": tools, "subagents": children, "compactions": compactions}


# A session lists the calls its totals count, where they count them: a model call in the session it
# names (llm_calls.session_id), a tool call in its own, else its run's (TOOL_SESSION). They are found
# by index through the session's runs (runs rows, and runs only their events tell, run_activity), the
# side branches it became and the calls no run of theirs is known for (read before it, or told by a hook
# alone: run_id ''), then kept where they count: a Claude Code Task subagent's calls name the parent's
# run, but are the subagent's.
_MINE = "mine(session_id) AS (SELECT value FROM json_each(?1))"
_LLM_LISTED = f"SELECT l.ts_ms, l.run_id, l.model, l.total_tokens, l.cost_pico, {UNPRICED}"
_SESSION_LLM_CALLS = f"""
WITH {_MINE}, found(id) AS (
    SELECT l.id FROM runs AS r JOIN llm_calls AS l ON l.run_id = r.run_id WHERE r.session_id IN mine
    UNION SELECT id FROM llm_calls WHERE branch IN mine
    UNION SELECT id FROM llm_calls WHERE run_id IS NULL AND session_id IN mine
)
{_LLM_LISTED} FROM found JOIN llm_calls AS l ON l.id = found.id WHERE l.session_id IN mine
"""
_EVERY_LLM_CALL_OF = f"WITH {_MINE} {_LLM_LISTED} FROM llm_calls AS l WHERE l.session_id IN mine"
# Calls at one time in the order the found set and the time index both hand them over, now named: a listing
# cut by a limit or a window keeps the order the whole one has.
_LLM_ORDER = "l.ts_ms, l.id"
_SESSION_TOOL_CALLS = f"""
WITH {_MINE}, found(run_id, tool_call_id) AS (
    SELECT tc.run_id, tc.tool_call_id FROM runs AS r JOIN tool_calls AS tc ON tc.run_id = r.run_id
    WHERE r.session_id IN mine
    UNION SELECT tc.run_id, tc.tool_call_id FROM run_activity AS a JOIN tool_calls AS tc ON tc.run_id = a.run_id
    WHERE a.session_id IN mine
    UNION SELECT run_id, tool_call_id FROM tool_calls WHERE branch IN mine
    UNION SELECT run_id, tool_call_id FROM tool_calls WHERE run_id = '' AND session_id IN mine
)
SELECT {_TOOL_COLUMNS} FROM found JOIN tool_calls AS tc USING (run_id, tool_call_id) {TOOL_RUNS}
WHERE {TOOL_SESSION} IN mine
"""
_EVERY_TOOL_CALL_OF = f"""
WITH {_MINE} SELECT {_TOOL_COLUMNS} FROM tool_calls AS tc {TOOL_RUNS}
WHERE {TOOL_SESSION} IN mine
"""
_TOOL_ORDER = "coalesce(tc.started_ms, tc.ended_ms), tc.run_id, tc.tool_call_id"


def _calls_of(conn: apsw.Connection, ids: list[str], counted: int, indexed: str, every: str, then: str,
              params: tuple = ()) -> Iterable[tuple]:
    """The calls of these session instances, by index; when that finds fewer than their totals count (a
    call naming the session under another session's run, as a run going on across a reset leaves), by a
    scan of every call: what is listed is always what is counted. ``then`` (with ``params``) orders them, and
    may narrow them (a window, a limit): then what the index finds is counted in SQLite first, not read here."""
    mine = _json_list(ids)
    if not params:  # all of them, in order: the index's rows themselves tell whether it found them all
        rows = conn.execute(f"{indexed} {then}", (mine,)).fetchall()
        return rows if len(rows) >= counted else conn.execute(f"{every} {then}", (mine,)).fetchall()
    found = conn.execute(f"SELECT count(*) FROM ({indexed})", (mine,)).fetchall()[0][0] if counted else 0
    return conn.execute(f"{indexed if found >= counted else every} {then}", (mine, *params))


def _ratio(before: int | None, after: int | None) -> float | None:
    return round(before / after, 3) if before and after else None


def _compactions(conn: apsw.Connection, ids: list[str], keys: list[str]) -> list[dict]:
    """Compactions of these session instances (and of their keys' when no instance could be told)."""
    out = []
    for (key, sid, started, ended, m0, m1, compacting, compacted, t0, t1) in conn.execute(
            "SELECT session_key, session_id, started_ms, ended_ms, messages_before, messages_after, compacting_count, "
            "compacted_count, tokens_before, tokens_after FROM compaction_pairs "
            "WHERE session_id IN (SELECT value FROM json_each(?1)) "
            "OR (session_id IS NULL AND session_key IN (SELECT value FROM json_each(?2))) "
            "ORDER BY coalesce(started_ms, ended_ms)", (_json_list(ids), _json_list(keys))):
        # Before ÷ after: how many times smaller the context became, by tokens where both are known.
        by_tokens = _ratio(t0, t1)
        ratio, basis = (by_tokens, "tokens") if by_tokens is not None else (_ratio(m0, m1), "messages")
        out.append({
            "at": iso(started if started is not None else ended),
            "phase": "start" if ended is None else "end" if started is None else "complete",
            "message_count": m0 if started is not None else m1, "compacting_count": compacting, "token_count": t0,
            "compacted_count": compacted, "session_key": key, "session_id": sid, "started_at": iso(started),
            "ended_at": iso(ended), "duration_ms": ended - started if started is not None and ended is not None
            else None, "messages_before": m0, "messages_after": m1, "tokens_before": t0, "tokens_after": t1,
            "compaction_ratio": ratio, "ratio_basis": basis if ratio is not None else None,
        })
    return out


def _lifecycle(conn: apsw.Connection, ids: list[str]) -> list[dict]:
    """Starts, suspensions, returns, resets and ends of these session instances, as timeline items."""
    items = []
    for sid, started, ended, reason, resumed in conn.execute(
            "SELECT session_id, started_ms, ended_ms, end_reason, resumed_from FROM sessions "
            "WHERE session_id IN (SELECT value FROM json_each(?))", (_json_list(ids),)):
        if started is not None:
            what = f"started (reset of {resumed})" if resumed else "started"
            items.append(_item(iso(started), "session", what, sid))
        if ended is not None:
            items.append(_item(iso(ended), "session", f"ended ({reason or 'end'})", sid))
    for sid, since, until, cause in conn.execute(
            "SELECT session_id, from_ms, until_ms, cause FROM session_suspensions "
            "WHERE session_id IN (SELECT value FROM json_each(?))", (_json_list(ids),)):
        why = "gateway restart" if cause == "seq" else "gateway idle"
        items.append(_item(iso(since), "session", f"suspended ({why})", sid))
        if until is not None:
            items.append(_item(iso(until), "session", f"resumed after {(until - since) / 1000:.0f}s", sid))
    return items


def _family_cost(session_key: str, spawned: _Spawned, costs: dict[str, tuple[int, int]],
                 counted: set[str]) -> tuple[int, int]:
    """The own cost of a session key with its subagents', at any depth (``spawned`` and ``costs`` must
    hold them all), leaving out the ``counted`` keys: a malformed log's cycle back to them."""
    total = unpriced = 0
    for key in [session_key, *_reachable(session_key, spawned, counted)]:
        cost, n = costs.get(key, (0, 0))
        total, unpriced = total + cost, unpriced + n
    return total, unpriced


def tree(conn: apsw.Connection, key: str) -> dict:
    """The subagent hierarchy under a session key (or under the one instance a session id names),
    each node with its own and cumulative cost."""
    ids, whole_key = _session_ids(conn, key)
    root = conn.execute("SELECT session_key FROM sessions WHERE session_id = ?", (ids[0],)).fetchall()[0][0] or key
    spawned = _spawned(conn, [root])
    if whole_key:
        costs = _own_costs(conn, _family_keys([root], spawned))
    else:  # the instance's own cost and subagents, and theirs: not its key's other instances'
        mine = {r[0] for r in _subagent_rows(conn, Window(), [root], ids)}
        spawned[root] = [c for c in spawned.get(root, []) if c[0] in mine]
        costs = _own_costs(conn, _reachable(root, spawned)) | {root: _instances_cost(conn, ids)}

    def node(session_key: str, label: str | None) -> dict:
        own, unpriced = costs.get(session_key, (0, 0))
        return {"session_key": session_key, "label": label, "own_cost_usd": _usd(own),
                "own_unpriced_calls": unpriced, "cumulative_cost_usd": None, "cumulative_unpriced_calls": None,
                "children": []}

    # Depth first, each key once (a malformed log's cycle ends where it comes back), with a stack of its
    # own: a chain of subagents may run deeper than Python recurses. A node's cumulative cost is known
    # once its last child's is, added in pico-dollars (its float past $9,007 holds no longer every one).
    top = node(root, None)
    seen, stack, cumulative = {root}, [(top, iter(spawned.get(root, [])))], {}
    while stack:
        parent, pending = stack[-1]
        for child_key, label in pending:
            if child_key not in seen:
                seen.add(child_key)
                child = node(child_key, label)
                parent["children"].append(child)
                stack.append((child, iter(spawned.get(child_key, []))))
                break
        else:
            stack.pop()
            children = parent["children"]
            own, unpriced = costs.get(parent["session_key"], (0, 0))
            pico = cumulative[parent["session_key"]] = own + sum(cumulative[c["session_key"]] for c in children)
            parent["cumulative_cost_usd"] = _usd(pico)
            parent["cumulative_unpriced_calls"] = unpriced + sum(c["cumulative_unpriced_calls"] for c in children)
    return top


def subagents(conn: apsw.Connection, w: Window, *, parent_keys: list[str] | None = None) -> list[dict]:
    rows = _subagent_rows(conn, w, parent_keys)
    return _subagent_dicts(rows, _own_costs(conn, [r[0] for r in rows]))


def _spawned_by_instance(instances: str) -> str:
    """Whether a subagents row was spawned by one of the instances ``instances`` picks (a condition on
    ``session_ids AS m``). A subagent belongs to the instance of its parent's key that was current when it
    was spawned: the one whose validity window (session_ids) holds the spawn, as the hot views' families
    count it too (_FAMILIES). One spawned before the key's first known instance (say by a reset transcript
    the ledger keys apart) belongs to none of them."""
    return f"""EXISTS (
    SELECT 1 FROM session_ids AS m WHERE {instances}
    AND m.session_key = subagents.parent_session_key
    AND coalesce(subagents.spawned_ms, subagents.ended_ms, 0) >= m.valid_from_ms
    AND (m.valid_until_ms IS NULL OR coalesce(subagents.spawned_ms, subagents.ended_ms, 0) < m.valid_until_ms))"""


def _subagent_rows(conn: apsw.Connection, w: Window, parent_keys: list[str] | None,
                   parent_ids: list[str] | None = None) -> list[tuple]:
    """Subagents in the window (of these parent keys; of those, spawned by these parent instances),
    latest first, the child's key first."""
    params: list = []
    cond = _between("coalesce(spawned_ms, ended_ms)", w.since, w.until, params) + _agent("child_agent_id", w, params)
    if parent_keys is not None:
        cond += " AND parent_session_key IN (SELECT value FROM json_each(?))"
        params.append(_json_list(parent_keys))
    if parent_ids is not None:
        cond += f" AND {_spawned_by_instance('m.session_id IN (SELECT value FROM json_each(?))')}"
        params.append(_json_list(parent_ids))
    limit = _limit(w, params)
    return conn.execute(
        "SELECT child_session_key, parent_session_key, parent_run_id, child_agent_id, label, mode, status, "
        f"spawned_ms, ended_ms, duration_ms, outcome, reason, model FROM subagents WHERE {cond} "
        f"ORDER BY coalesce(spawned_ms, ended_ms) DESC {limit}", params).fetchall()


SUBAGENT_FIELDS = ("child_session_key", "parent_session_key", "parent_run_id", "agent_id", "label", "mode", "status",
                   "spawned_at", "ended_at", "duration_ms", "outcome", "reason", "model", "cost_usd", "unpriced_calls")


def _subagent_dicts(rows: list[tuple], costs: dict[str, tuple[int, int]]) -> list[dict]:
    out = []
    for c, p, r, a, lbl, mode, st, s, e, d, o, why, m in rows:
        cost, unpriced = costs.get(c, (0, 0))
        out.append(_row(SUBAGENT_FIELDS, (c, p, r, a, lbl, mode, st, iso(s), iso(e), d, o, why, m, _usd(cost),
                                          unpriced)))
    return out


TOOL_FIELDS = (*TOOL_COST_FIELDS, "error_rate", "p50_ms", "p95_ms", "p99_ms")


def tools(conn: apsw.Connection, w: Window, *, name: str | None = None, errors_only: bool = False) -> list[dict]:
    """Per tool: calls, errors, error rate and duration percentiles (from the rows, on demand)."""
    rows = _tool_costs(conn, Window(since=w.since, until=w.until, agent=w.agent))
    if name is not None:
        rows = [r for r in rows if r["tool"] == name]
    if errors_only:
        rows = [r for r in rows if r["errors"]]
    durations = _durations(conn, w, "tool_calls", "tool_name", "coalesce(started_ms, ended_ms)")
    out = []
    for r in rows:
        p50, p95, p99 = _percentiles(durations.get(r["tool"] or "", []))
        out.append(_row(TOOL_FIELDS, (r["tool"], r["calls"], r["errors"], r["duration_s"],
                                      round(r["errors"] / r["calls"], 4) if r["calls"] else 0.0, p50, p95, p99)))
    return out[: w.limit] if w.limit else out


ERROR_FIELDS = ("kind", "at", "session_key", "name", "id", "error")


def errors(conn: apsw.Connection, w: Window) -> list[dict]:
    """Failed runs and failed tool calls, most recent first."""
    failed_runs = [_row(ERROR_FIELDS, ("run", r["started_at"] or r["ended_at"], r["session_key"], r["model"],
                                       r["run_id"], r["error"]))
                   for r in runs(conn, Window(since=w.since, until=w.until, agent=w.agent), status="error")]
    params: list = []
    cond = _between("coalesce(tc.started_ms, tc.ended_ms)", w.since, w.until, params) + _agent("tc.agent_id", w,
                                                                                                params)
    failed_tools = [_row(ERROR_FIELDS, ("tool", t["started_at"] or t["ended_at"], t["session_key"], t["tool_name"],
                                        t["tool_call_id"], t["error"]))
                    for t in map(_tool_dict, conn.execute(
                        f"SELECT {_TOOL_COLUMNS} FROM tool_calls AS tc WHERE tc.status = 'error' AND {cond}",
                        params))]
    out = sorted(failed_runs + failed_tools, key=lambda r: r["at"] or "", reverse=True)
    return out[: w.limit] if w.limit else out


TOP = ("runs", "tools", "models", "sessions")


def top_fields(what: str) -> tuple[str, ...]:
    """The keys of a ``top`` row."""
    return {"runs": RUN_FIELDS, "tools": TOOL_FIELDS, "models": cost_fields("model"),
            "sessions": cost_fields("session")}[what]


def top(conn: apsw.Connection, w: Window, what: str) -> list[dict]:
    limit = w.limit or 10
    if what == "models":
        return costs(conn, Window(since=w.since, until=w.until, agent=w.agent, limit=limit), "model")
    if what == "tools":
        return sorted(tools(conn, Window(since=w.since, until=w.until, agent=w.agent)),
                      key=lambda r: (-r["calls"], str(r["tool"])))[:limit]
    if what == "sessions":
        return costs(conn, Window(since=w.since, until=w.until, agent=w.agent, limit=limit), "session")
    if what == "runs":
        params: list = []
        cond = _between("coalesce(r.started_ms, r.ended_ms)", w.since, w.until, params) + _agent("r.agent_id", w,
                                                                                                  params)
        params.append(limit)
        return [_run_dict(row) for row in conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM {_RUN_FROM} WHERE {cond} ORDER BY run_cost DESC LIMIT ?", params)]
    raise ValueError(f"cannot rank {what!r}: choose one of {', '.join(TOP)}")


EVENT_FIELDS = ("at", "event_id", "kind", "agent_id", "session_key", "file", "offset")


def events(conn: apsw.Connection, w: Window, *, kinds: list[str] | None = None) -> Iterator[dict]:
    """The events of the window, most recent first, read as they are taken: an export may hold millions."""
    params: list = []
    # Retention reduces old events to their key, with kind '': nothing left to show.
    cond = _between("ts_ms", w.since, w.until, params) + _agent("agent_id", w, params) + " AND kind <> ''"
    if kinds:
        cond += " AND kind IN (SELECT value FROM json_each(?))"
        params.append(_json_list(kinds))
    limit = _limit(w, params)
    rows = conn.execute(
        f"SELECT e.ts_ms, e.id, e.kind, e.agent_id, e.session_key, f.path, e.offset FROM events AS e "
        f"LEFT JOIN files AS f ON f.id = e.file_id WHERE {cond} ORDER BY e.ts_ms DESC, e.id {limit}", params)
    # A hook event was posted, not read from a file: it has no offset in one.
    return (_row(EVENT_FIELDS, (iso(ts), f"{eid & (2**64 - 1):016x}", kind, agent, key, path,
                                None if path is None else off))
            for ts, eid, kind, agent, key, path, off in rows)


def files(conn: apsw.Connection, w: Window, *, path_glob: str | None = None) -> Iterator[dict]:
    """Tool calls that touched a file path, most recent first, read as they are taken; ``path_glob`` uses * and ?."""
    params: list = []
    cond = _between("coalesce(tc.started_ms, tc.ended_ms)", w.since, w.until, params) + _agent("tc.agent_id", w,
                                                                                                params)
    if path_glob:
        cond += " AND tc.file_path GLOB ?"
        params.append(path_glob)
    limit = _limit(w, params)
    return (_tool_dict(r) for r in conn.execute(
        f"SELECT {_TOOL_COLUMNS} FROM tool_calls AS tc WHERE tc.file_path IS NOT NULL AND {cond} "
        f"ORDER BY coalesce(tc.started_ms, tc.ended_ms) DESC {limit}", params))


TIMELINE_KINDS = ("run", "llm", "tool", "compaction", "subagent", "session")
TIMELINE_FIELDS = ("at", "kind", "what", "id", "cost_usd", "unpriced_calls")


def _item(at: str | None, kind: str, what: str, item_id: str | None, cost_usd: float | None = None,
          unpriced: int = 0) -> dict:
    return _row(TIMELINE_FIELDS, (at, kind, what, item_id, cost_usd, unpriced))


def timeline(conn: apsw.Connection, key: str, kinds: list[str] | None = None, w: Window = Window()) -> list[dict]:
    """Everything that happened in a session within [w.since, w.until], in time order, the first w.limit of it.
    Each kind reads its own items of the window, in time order and no more than w.limit of them, so that a
    short answer costs what it shows, not what the session holds."""
    ids, whole_key = _session_ids(conn, key)
    instances = sessions(conn, Window(), session_ids=ids)
    keys = sorted({s["session_key"] for s in instances if s["session_key"]})
    read = {
        "run": lambda: _run_items(conn, ids, w),
        "llm": lambda: _llm_items(conn, ids, sum(i["llm_calls"] + i["llm_errors"] for i in instances), w),
        "tool": lambda: _tool_items(conn, ids, sum(i["tool_calls"] for i in instances), w),
        "compaction": lambda: _in_time_order([_item(c["at"], "compaction", _compaction_what(c), c["session_id"])
                                              for c in _compactions(conn, ids, keys)], w),
        "subagent": lambda: _subagent_items(conn, keys, None if whole_key else ids, w),
        "session": lambda: _in_time_order(_lifecycle(conn, ids), w),
    }
    want = set(kinds or TIMELINE_KINDS)
    # Of items at one time, the kinds come in TIMELINE_KINDS order (merge takes ties from the earlier stream).
    merged = heapq.merge(*(read[kind]() for kind in TIMELINE_KINDS if kind in want), key=_at)
    return list(itertools.islice(merged, w.limit))


def _at(item: dict) -> str:
    # Every time here is ISO 8601 UTC to the millisecond, years 1 to 9999: text order is time order.
    return item["at"] or ""


def _in_time_order(items: list, w: Window, at=_at) -> list:
    """Those of ``items`` in [w.since, w.until] in time order (ties as they came), the first w.limit of them."""
    if w.since is not None or w.until is not None:
        lo, hi = iso(w.since) or "", iso(w.until) or "~"
        items = [i for i in items if at(i) and lo <= at(i) <= hi]
    return sorted(items, key=at)[: w.limit]


# The time iso() shows: none outside years 1 to 9999, which a ledger written before such times were rejected
# may hold. Such an item comes first in a timeline and in no window of one, as its missing time does.
_FIRST_SHOWN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z


def _shown(*columns: str) -> str:
    """The first of ``columns`` that iso() shows, as ``iso(a) or iso(b)`` picks an item's time."""
    shown = [f"iif({c} BETWEEN {_FIRST_SHOWN_MS} AND {LATEST_MS}, {c}, NULL)" for c in columns]
    return shown[0] if len(shown) == 1 else f"coalesce({', '.join(shown)})"


def _in_sql_time_order(shown: str, order: str, w: Window, params: list) -> str:
    """The condition and order after a WHERE that keep a kind's rows in the window, ordered by the time
    their item shows, then by ``order`` (the kind's own), the first w.limit of them."""
    return f"AND {_between(shown, w.since, w.until, params)} ORDER BY {shown}, {order} {_limit(w, params)}"


def _run_items(conn: apsw.Connection, ids: list[str], w: Window) -> Iterator[dict]:
    params: list = [_json_list(ids)]
    # Of runs at one time: by instance, then as runs_by_session_start holds them, as the session's list has them.
    then = _in_sql_time_order(_shown("r.started_ms", "r.ended_ms"),
                              "coalesce(r.started_ms, r.ended_ms), r.session_id, r.started_ms, r.rowid", w, params)
    for r in map(_run_dict, conn.execute(f"SELECT {_RUN_COLUMNS} FROM {_RUN_FROM} "
                                         f"WHERE r.session_id IN (SELECT value FROM json_each(?)) {then}", params)):
        yield _item(r["started_at"] or r["ended_at"], "run", f"{r['model'] or '-'} {r['status']}", r["run_id"],
                    r["cost_usd"], r["unpriced_calls"])


def _llm_items(conn: apsw.Connection, ids: list[str], counted: int, w: Window) -> Iterator[dict]:
    params: list = []
    then = _in_sql_time_order(_shown("l.ts_ms"), _LLM_ORDER, w, params)
    for ts, run_id, model, tokens, cost, unpriced in _calls_of(conn, ids, counted, _SESSION_LLM_CALLS,
                                                               _EVERY_LLM_CALL_OF, then, tuple(params)):
        yield _item(iso(ts), "llm", f"{model or '-'} {tokens} tokens", run_id, None if cost is None else _usd(cost),
                    unpriced)


def _tool_items(conn: apsw.Connection, ids: list[str], counted: int, w: Window) -> Iterator[dict]:
    params: list = []
    then = _in_sql_time_order(_shown("tc.started_ms", "tc.ended_ms"), _TOOL_ORDER, w, params)
    for t in map(_tool_dict, _calls_of(conn, ids, counted, _SESSION_TOOL_CALLS, _EVERY_TOOL_CALL_OF, then,
                                       tuple(params))):
        yield _item(t["started_at"] or t["ended_at"], "tool", f"{t['tool_name'] or '-'} {t['status']}",
                    t["tool_call_id"])


def _subagent_items(conn: apsw.Connection, keys: list[str], parent_ids: list[str] | None, w: Window) -> list[dict]:
    # Costs only of those shown: each is a read of the subagent's own sessions.
    rows = _in_time_order(_subagent_rows(conn, Window(), keys, parent_ids), w, lambda r: iso(r[7]) or iso(r[8]))
    return [_item(s["spawned_at"] or s["ended_at"], "subagent", f"{s['label'] or '-'} {s['outcome'] or s['status']}",
                  s["child_session_key"], s["cost_usd"], s["unpriced_calls"])
            for s in _subagent_dicts(rows, _own_costs(conn, [r[0] for r in rows]))]


# -- what gates and the hot store read ------------------------------------------------------------

_HOT_TOTALS = ("llm_calls", "llm_errors", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
               "total_tokens", "cost_pico", "unpriced_calls", "tool_calls", "tool_errors")
# The current instance of each key (a reset starts a new one): the latest started of those with
# that session key, else the session with that id (sources keyed by id).
_CURRENT_INSTANCES = """
SELECT key, session_id, session_key, agent_id, status, started, ended_ms, last_ms FROM (
    SELECT j.value AS key, s.session_id, s.session_key, s.agent_id, s.status,
           coalesce(s.started_ms, s.first_ms) AS started, s.ended_ms, s.last_ms,
           row_number() OVER (PARTITION BY j.value
                              ORDER BY coalesce(s.started_ms, s.first_ms) DESC, s.session_id DESC) AS n
    FROM json_each(?1) AS j JOIN sessions AS s ON s.session_key = j.value
) WHERE n = 1
UNION ALL
SELECT j.value, s.session_id, s.session_key, s.agent_id, s.status, coalesce(s.started_ms, s.first_ms), s.ended_ms,
       s.last_ms
FROM json_each(?1) AS j JOIN sessions AS s ON s.session_id = j.value
WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE session_key = j.value)
"""
# For each [session key, session id] of an instance (its root): the subagent sessions that instance spawned
# while it was its key's current one (as `session ID` and `tree ID` count them), and the ones those spawned,
# at any depth; a malformed log cannot loop here: UNION drops pairs already seen. The family is read from its
# root outwards (CROSS JOIN keeps that order): its size, not the ledger's, is what it costs.
_FAMILY = f"""
WITH RECURSIVE roots(session_key, session_id) AS (
    SELECT value ->> 0, value ->> 1 FROM json_each(?)
), fam(root, root_key, k) AS (
    SELECT r.session_id, r.session_key, subagents.child_session_key FROM roots AS r
    JOIN subagents ON subagents.parent_session_key = r.session_key
    WHERE {_spawned_by_instance("m.session_id = r.session_id")}
    UNION
    SELECT fam.root, fam.root_key, a.child_session_key FROM subagents AS a JOIN fam ON a.parent_session_key = fam.k
), kin(root, session_id) AS (
    SELECT fam.root, s.session_id FROM fam CROSS JOIN sessions AS s ON s.session_key = fam.k
    WHERE s.session_key != fam.root_key
)"""
_FAMILIES = _FAMILY + "SELECT session_id FROM kin"
# Per root: its own totals (in_family 0) and its family's (1), snapshot fallbacks included, each with the
# last change of the instances summed. Summed here rather than row by row in Python: a family of tens of
# thousands is one row out, not one per subagent. A position has one commit, so one mark: the mark beside
# the greatest position (the row max() picks) is that commit's.
_FAMILY_TOTALS = _FAMILY + f""", members(root, in_family, session_id) AS MATERIALIZED (
    SELECT session_id, 0, session_id FROM roots UNION ALL SELECT root, 1, session_id FROM kin
)
SELECT root, in_family, {', '.join(f'coalesce(sum({c}), 0)' for c in _HOT_TOTALS)}, max(seq), mark FROM (
    SELECT m.root, m.in_family, {', '.join(f't.{c}' for c in _HOT_TOTALS)},
           coalesce(c.seq, 0) AS seq, coalesce(c.mark, '') AS mark
    FROM members AS m LEFT JOIN session_totals AS t ON t.session_id = m.session_id
    LEFT JOIN session_changes AS c ON c.session_id = m.session_id
    UNION ALL
    SELECT m.root, m.in_family, {', '.join(f'f.{c}' if c in FALLBACK_COLUMNS else '0' for c in _HOT_TOTALS)}, NULL, NULL
    FROM members AS m CROSS JOIN session_fallback_costs AS f ON f.session_id = m.session_id
) GROUP BY root, in_family
"""
_CURRENT_RUNS = """
SELECT session_id, run_id FROM (
    SELECT r.session_id, r.run_id,
           row_number() OVER (PARTITION BY r.session_id
                              ORDER BY coalesce(r.started_ms, r.ended_ms) DESC, r.run_id DESC) AS n
    FROM json_each(?) AS j JOIN runs AS r ON r.session_id = j.value AND r.status = 'running'
) WHERE n = 1
"""


def ledger_position(conn: apsw.Connection) -> int:
    """The number of the last batch the ledger committed."""
    return conn.execute("SELECT seq FROM ledger_position WHERE id = 1").fetchall()[0][0]


def ledger_id(conn: apsw.Connection) -> str:
    """The random name this ledger was given when it was created."""
    return conn.execute("SELECT ledger_id FROM ledger_identity WHERE id = 1").fetchall()[0][0]


def series_epoch(conn: apsw.Connection) -> tuple[str, int]:
    """What metric series' values stand on: the ledger, and how many times its series were rewritten
    (``repricings``: each reprice, each repair of the rollups, a migration that changed what they hold)."""
    return conn.execute("SELECT ledger_id, repricings FROM ledger_identity, ledger_position").fetchall()[0]


def hot_session(conn: apsw.Connection, key: str) -> dict | None:
    """What gates measure of a session: its current instance (a reset starts a new one), alone
    and with the subagents spawned while it was its key's current one; None when the ledger has no
    such session. ``key`` is a session key, or a session id (that instance, current or not)."""
    return hot_sessions(conn, [key]).get(key)


def current_instances(conn: apsw.Connection, keys: list[str]) -> dict[str, str]:
    """The session id of each key's current instance (a reset starts a new one); unknown keys left out."""
    return {row[0]: row[1] for row in conn.execute(_CURRENT_INSTANCES, (_json_list(keys),))}


def hot_sessions(conn: apsw.Connection, keys: list[str]) -> dict[str, dict]:
    """``hot_session`` of many keys in four queries, however many: the daemon refreshes every
    session a transaction changed at once. Keys the ledger does not know are left out."""
    current = {row[0]: row[1:] for row in conn.execute(_CURRENT_INSTANCES, (_json_list(keys),))}
    if not current:
        return {}
    # By instance: a view held under its key and one under its session id share one, summed once.
    roots = {sid: session_key or key for key, (sid, session_key, *_) in current.items()}
    sums = {(sid, in_family): (_hot_totals(values), (seq, mark)) for sid, in_family, *values, seq, mark in
            conn.execute(_FAMILY_TOTALS, (_json_list((key, sid) for sid, key in roots.items()),))}
    runs = dict(conn.execute(_CURRENT_RUNS, (_json_list(roots),)))
    ledger = ledger_id(conn)
    no_family = (dict.fromkeys(_HOT_TOTALS, 0), (0, ""))

    views = {}
    for key, (sid, session_key, agent, status, started, ended, last) in current.items():
        own, own_changed = sums[sid, 0]
        kin, kin_changed = sums.get((sid, 1), no_family)
        seq, mark = max(own_changed, kin_changed)
        views[key] = {
            "session_key": session_key or key, "session_id": sid, "agent_id": agent, "status": status,
            "started_ms": started, "ended_ms": ended, "last_activity_ms": last, "current_run": runs.get(sid),
            **own, "family": {k: own[k] + kin[k] for k in _HOT_TOTALS},
            # The commit its sums last changed at, by position and mark: a restored copy of the ledger
            # numbers its own commits as the original did, but marks them anew.
            "changed": f"{seq}:{mark}", "ledger": ledger,
        }
    return views


def _hot_totals(values: list[int]) -> dict[str, int]:
    """Summed _HOT_TOTALS as a view counts them: failed calls apart, as every report counts them."""
    out = dict(zip(_HOT_TOTALS, values))
    out["llm_calls"] -= out["llm_errors"]
    return out


def family_session_ids(conn: apsw.Connection, session_key: str, session_id: str) -> list[str]:
    """Instances of the subagents an instance of a session key spawned (at any depth), as ``hot_session``
    counts them in its family."""
    return [sid for (sid,) in conn.execute(_FAMILIES, (_json_list([(session_key, session_id)]),))]


def session_keys_of(conn: apsw.Connection, session_ids: list[str]) -> tuple[set[str], set[str]]:
    """What a hot view can be held under that a change to these instances can move: the session
    keys (their own and every ancestor's), and the session ids of those keys' instances and of
    these, which gates may be asked by instead."""
    keys: set[str] = set()
    ids = set(session_ids)
    for name, is_key in conn.execute("""
        WITH RECURSIVE up(k) AS (
            SELECT coalesce(session_key, session_id) FROM sessions WHERE session_id IN (SELECT value FROM json_each(?))
            UNION
            SELECT a.parent_session_key FROM subagents AS a JOIN up ON a.child_session_key = up.k
            WHERE a.parent_session_key IS NOT NULL
        )
        SELECT k, 1 FROM up
        UNION ALL
        SELECT s.session_id, 0 FROM up JOIN sessions AS s ON s.session_key = up.k""", (_json_list(session_ids),)):
        (keys if is_key else ids).add(name)
    return keys, ids


def claude_code_tool_calls(conn: apsw.Connection, call_ids: list[str]) -> dict[str, bool]:
    """Which of these tool_use_ids the ledger holds as Claude Code tool calls (a transcript told them, or
    their hook events were recorded), each with whether it counts as a failed call there."""
    held: dict[str, bool] = {}
    # A hook's row keeps its own source (writer.HOOK_ROW_SOURCE) until a transcript line takes it over;
    # each source has its partial index.
    for call_id, failed in conn.execute(
            "SELECT tool_call_id, status = 'error' FROM tool_calls WHERE source = 'claude-code' "
            "AND tool_call_id IN (SELECT value FROM json_each(?1)) UNION ALL "
            "SELECT tool_call_id, status = 'error' FROM tool_calls WHERE source = 'claude-code-hook' "
            "AND tool_call_id IN (SELECT value FROM json_each(?1))", (_json_list(call_ids),)):
        held[call_id] = held.get(call_id, False) or bool(failed)
    return held


# A Claude Code tool call as the ledger holds it (its transcript told it, or its hook event was recorded): its
# session, and the calls of its run its transcript tells that are still running, the call itself among them
# if it is one. Each source has its partial index (see claude_code_tool_calls); a run's calls are its key's.
_CALL_AND_OPEN_SIBLINGS = """
WITH x AS (SELECT run_id, session_id FROM tool_calls WHERE source = 'claude-code' AND tool_call_id = ?1
           UNION ALL
           SELECT run_id, session_id FROM tool_calls WHERE source = 'claude-code-hook' AND tool_call_id = ?1
           LIMIT 1)
SELECT x.session_id, t.tool_call_id FROM x
LEFT JOIN tool_calls AS t ON t.run_id = x.run_id AND t.status = 'running' AND t.source = 'claude-code'
"""


def claude_code_open_siblings(conn: apsw.Connection, call_id: str) -> tuple[str | None, set[str]] | None:
    """(session id, ids of the running calls its transcript tells in its run) of a Claude Code tool call the
    ledger holds; None if it holds no such call."""
    rows = conn.execute(_CALL_AND_OPEN_SIBLINGS, (call_id,)).fetchall()
    if not rows:
        return None
    return rows[0][0], {sibling for _, sibling in rows if sibling is not None}


# A session's Task calls still running whose spawn no subagent's row holds yet (see spawns_held), each with
# the type of subagent its spawn asked for, when its line was read. Running tool calls are few: the
# partial index of unsettled calls finds them by name.
# The status IN (...) is the partial index tool_calls_unsettled's own condition: with it the Task calls are
# found through that index rather than by a scan of every tool call.
_OPEN_TASKS = """
SELECT t.tool_call_id, s.mode FROM tool_calls AS t
LEFT JOIN subagents AS s ON s.child_session_key = ?3 || t.tool_call_id
WHERE t.tool_name IN (SELECT value FROM json_each(?2)) AND t.status IN ('running', 'interrupted')
AND t.status = 'running' AND t.session_id = ?1
AND NOT EXISTS (SELECT 1 FROM subagents AS c WHERE c.spawn_key = ?3 || t.tool_call_id)
"""


def open_tasks(conn: apsw.Connection, session_id: str, tools: list[str], spawn_prefix: str) -> dict[str, str | None]:
    """{call id: subagent type asked for (None if not known yet)} of the Task calls (``tools``) session
    ``session_id`` made that are still running and whose spawn (key ``spawn_prefix`` + call id) no
    subagent's row holds."""
    return dict(conn.execute(_OPEN_TASKS, (session_id, _json_list(tools), spawn_prefix)))


def spawns_held(conn: apsw.Connection, spawn_keys: list[str]) -> dict[str, str]:
    """{spawn key: the child's key} of these Task spawns that a subagent's row holds already."""
    return dict(conn.execute("SELECT spawn_key, child_session_key FROM subagents "
                             "WHERE spawn_key IN (SELECT value FROM json_each(?))", (_json_list(spawn_keys),)))


def spawn_held_by(conn: apsw.Connection, child_key: str) -> str | None:
    """The spawn key of the Task whose spawn subagent ``child_key``'s row holds; None if none (or no row)."""
    rows = conn.execute("SELECT spawn_key FROM subagents WHERE child_session_key = ?", (child_key,)).fetchall()
    return rows[0][0] if rows else None


def spawner_known(conn: apsw.Connection, child_key: str) -> bool:
    """Whether subagent ``child_key``'s row says which session spawned it."""
    return bool(conn.execute("SELECT 1 FROM subagents WHERE child_session_key = ? AND parent_session_key IS NOT NULL",
                             (child_key,)).fetchall())


def session_starts(conn: apsw.Connection, session_id: str) -> int:
    """How many SessionStart hook events of ``session_id`` the ledger recorded."""
    return conn.execute("SELECT count(*) FROM hook_events INDEXED BY hook_session_starts "
                        "WHERE session_id = ? AND event = 'SessionStart'", (session_id,)).fetchall()[0][0]


def hook_event_times(conn: apsw.Connection, event_ids: list[int]) -> dict[int, int]:
    """{event id: when it first arrived} of these hook events the ledger recorded."""
    return dict(conn.execute("SELECT id, ts_ms FROM hook_events WHERE id IN (SELECT value FROM json_each(?))",
                             (_json_list(event_ids),)))


def day_totals(conn: apsw.Connection, since: int, until: int, agent: str | None = None) -> dict:
    """What day-scoped gates measure in [since, until]: model and tool calls only, from the rollups,
    cost in exact pico-USD (snapshot fallbacks included)."""
    w = Window(since=since, until=until, agent=agent)
    (llm,) = _windowed(conn, w, "usage", _USAGE_MEASURES[:1])
    (tools,) = _windowed(conn, w, "tool", _TOOL_MEASURES)
    totals = dict(zip(LLM_COLUMNS, _plus_fallback(llm, _fallback_total(conn, w))))
    return {"llm_calls": totals["llm_calls"] - totals["llm_errors"], "llm_errors": totals["llm_errors"],
            "total_tokens": totals["total_tokens"], "cost_pico": totals["cost_pico"],
            "unpriced_calls": totals["unpriced_calls"],
            "tool_calls": tools[0], "tool_errors": tools[1]}


def _compaction_what(c: dict) -> str:
    def span(before, after, unit):
        return f"{'?' if before is None else before}→{'?' if after is None else after} {unit}"

    what = f"{span(c['messages_before'], c['messages_after'], 'messages')}, " \
           f"{span(c['tokens_before'], c['tokens_after'], 'tokens')}"
    return what + (f" (×{c['compaction_ratio']} by {c['ratio_basis']})" if c["compaction_ratio"] else "")


# -- what watch, the web page and forecasts read ---------------------------------------------------


def activity(conn: apsw.Connection, since: int, until: int, *, session_ids: list[str] | None = None,
             agent: str | None = None) -> dict[str, list[tuple]]:
    """Each model call (ts, cost in pico-USD, tokens, unpriced) and tool call (ts, failed) in [since, until],
    of these session instances or this agent (neither: everyone), in time order."""
    llm_cond = tool_cond = ""
    params: list = [since, until]
    if session_ids is not None:
        params.append(_json_list(session_ids))
        llm_cond = " AND session_id IN (SELECT value FROM json_each(?3))"
        # Listed through their runs (what the session's turns did, its Task subagents' tools included);
        # the session totals count each call in its own session instead (verify.TOOL_SESSION).
        tool_cond = (" AND run_id IN (SELECT run_id FROM runs WHERE session_id IN (SELECT value FROM json_each(?3)) "
                     "UNION SELECT a.run_id FROM run_activity AS a LEFT JOIN runs AS r USING (run_id) "
                     "WHERE a.session_id IN (SELECT value FROM json_each(?3)) AND r.session_id IS NULL)")
    elif agent is not None:
        params.append(agent)
        llm_cond = tool_cond = " AND agent_id = ?3"
    llm = conn.execute(f"SELECT ts_ms, coalesce(cost_pico, 0), total_tokens, {UNPRICED} FROM llm_calls "
                       f"WHERE ts_ms BETWEEN ?1 AND ?2{llm_cond} ORDER BY ts_ms", params).fetchall()
    tools = conn.execute(
        "SELECT coalesce(started_ms, ended_ms), status = 'error' FROM tool_calls "
        f"WHERE coalesce(started_ms, ended_ms) BETWEEN ?1 AND ?2{tool_cond} ORDER BY coalesce(started_ms, ended_ms)",
        params).fetchall()
    return {"llm": llm, "tools": tools}


def recent_problems(conn: apsw.Connection, limit: int, since: int | None = None,
                    until: int | None = None) -> list[dict]:
    """The latest failed or interrupted tool calls and runs in [``since``, ``until``], most recent first."""
    out, bounds = [], (since or 0, LATEST_MS if until is None else until, limit)
    # Each walks its time index backwards from ``until`` to ``since`` and stops after ``limit`` matches.
    for kind, sql in (
            ("tool", "SELECT coalesce(started_ms, ended_ms), session_key, tool_name, tool_call_id, status, error "
                     "FROM tool_calls WHERE status IN ('error', 'interrupted') "
                     "AND coalesce(started_ms, ended_ms) BETWEEN ?1 AND ?2 "
                     "ORDER BY coalesce(started_ms, ended_ms) DESC LIMIT ?3"),
            ("run", "SELECT coalesce(started_ms, ended_ms), session_key, model, run_id, status, error "
                    "FROM runs WHERE status IN ('error', 'interrupted') "
                    "AND coalesce(started_ms, ended_ms) BETWEEN ?1 AND ?2 "
                    "ORDER BY coalesce(started_ms, ended_ms) DESC LIMIT ?3")):
        out += [{"kind": kind, "at_ms": at, "session_key": key, "name": name, "id": ident, "status": status,
                 "error": error} for at, key, name, ident, status, error in conn.execute(sql, bounds)]
    out.sort(key=lambda r: r["at_ms"] or 0, reverse=True)
    return [{**{k: v for k, v in r.items() if k != "at_ms"}, "at": iso(r["at_ms"])} for r in out[:limit]]


def ingest_health(conn: apsw.Connection, now_ms: int) -> list[dict]:
    """Per source: files followed, lines indexed and rejected, bytes not read yet, and how old the
    newest indexed event is (its lag)."""
    rejected = dict(conn.execute(
        "SELECT f.source, count(*) FROM rejects AS r JOIN files AS f ON f.id = r.file_id GROUP BY 1").fetchall())
    out = []
    for source, files, lines, unread in conn.execute(
            "SELECT source, sum(status IN ('live', 'rotated')), sum(lines), "
            "sum(CASE WHEN status IN ('live', 'rotated') THEN max(size - offset, 0) ELSE 0 END) "
            "FROM files GROUP BY 1 ORDER BY 1").fetchall():
        # Walks the time-ordered key backwards until an event of this source: cheap in practice.
        newest = conn.execute("SELECT ts_ms FROM events WHERE file_id IN (SELECT id FROM files WHERE source = ?) "
                              "ORDER BY ts_ms DESC LIMIT 1", (source,)).fetchall()
        newest_ms = newest[0][0] if newest else None
        bad = rejected.get(source, 0)
        out.append({"source": source, "files_tailed": files, "lines_indexed": lines - bad, "lines_rejected": bad,
                    "unread_bytes": unread, "newest_event_at": iso(newest_ms),
                    "lag_s": None if newest_ms is None else round(max(now_ms - newest_ms, 0) / 1000, 3)})
    return out


# Label dimension → the daily rollup whose rows say in which order the values came, and which rows count.
# A model comes with its first call, or with its first run: a run without calls may cost what its usage
# snapshot says, under the run's model, and that value must have its place before the cost comes.
_LABEL_SOURCES = {
    "model": ("usage_days", "model", "llm_calls > 0 OR cost_pico > 0 OR (runs > 0 AND model <> '')"),
    "tool": ("tool_days", "tool_name", "calls > 0"),
    "provider": ("usage_days", "provider", "llm_calls > 0 OR cost_pico > 0 OR (runs > 0 AND provider <> '')"),
}


def fallbacks_by_model(conn: apsw.Connection) -> dict[tuple[str, str], list[int]]:
    """The snapshot fallbacks (FALLBACK_COLUMNS) of every run without model calls, by provider and model ('' for
    none): from what the writer keeps per session, never from the runs."""
    return _session_fallbacks(conn, None, "provider, model")


def first_seen_values(conn: apsw.Connection, dimension: str, limit: int) -> set[str]:
    """The first ``limit`` values of a metric label dimension the ledger stored ("" for none).

    In the order they were stored, not by their events' time: logs read late may be older, and a
    value they date earlier must not overtake one kept already."""
    table, column, counted = _LABEL_SOURCES[dimension]
    return {v for (v,) in conn.execute(f"SELECT coalesce({column}, '') FROM {table} WHERE {counted} "
                                       "GROUP BY 1 ORDER BY min(rowid) LIMIT ?", (limit,))}
