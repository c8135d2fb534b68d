"""Every read the CLI and HTTP make, over a read-only connection, with bound parameters only."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass

import apsw
import orjson

from agentledger.facts import PICO_PER_USD
from agentledger.timeutil import iso

_TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens")


@dataclass(frozen=True, slots=True)
class Window:
    """Filters shared by queries: [since, until] inclusive, in ms; agent; row limit."""

    since: int | None = None
    until: int | None = None
    agent: str | None = None
    limit: int | None = None


def _usd(pico: int | None) -> float:
    return round((pico or 0) / PICO_PER_USD, 12)


def _range(column: str, w: Window, params: list) -> str:
    """SQL conditions for a time column; ``column`` is always a literal from this module."""
    parts = []
    if w.since is not None:
        parts.append(f"{column} >= ?")
        params.append(w.since)
    if w.until is not None:
        parts.append(f"{column} <= ?")
        params.append(w.until)
    return " AND ".join(parts) or "1"


_SUBAGENT_SESSION = (
    "(s.session_key IN (SELECT child_session_key FROM subagents) OR s.session_key LIKE 'agent:%:subagent:%')"
)

# Runs that produced no per-call cost fall back to the run-total cost of their usage snapshot.
_SNAPSHOT_FALLBACK = """
SELECT r.run_id, r.session_id, r.agent_id, coalesce(r.started_ms, r.ended_ms) AS ts_ms, max(u.cost_pico) AS cost_pico
FROM runs AS r JOIN usage_snapshots AS u
  ON u.session_id = r.session_id
 AND u.ts_ms BETWEEN r.started_ms AND coalesce(r.ended_ms, r.started_ms) + 60000
WHERE NOT EXISTS (SELECT 1 FROM run_llm_calls AS c WHERE c.run_id = r.run_id)
GROUP BY r.run_id
"""

_SLOT = 900_000
_LLM_SUMS = ("count(*), coalesce(sum(error IS NOT NULL), 0), coalesce(sum(input_tokens), 0), "
             "coalesce(sum(output_tokens), 0), coalesce(sum(cache_read_tokens), 0), "
             "coalesce(sum(cache_write_tokens), 0), coalesce(sum(total_tokens), 0), "
             "coalesce(sum(coalesce(cost_pico, 0)), 0), coalesce(sum(cost_pico IS NULL AND error IS NULL), 0)")
_SLOT_LLM_SUMS = ("coalesce(sum(llm_calls), 0), coalesce(sum(llm_errors), 0), coalesce(sum(input_tokens), 0), "
                  "coalesce(sum(output_tokens), 0), coalesce(sum(cache_read_tokens), 0), "
                  "coalesce(sum(cache_write_tokens), 0), coalesce(sum(total_tokens), 0), "
                  "coalesce(sum(cost_pico), 0), coalesce(sum(unpriced_calls), 0)")
_RUN_SUMS = ("count(*), coalesce(sum(status = 'running'), 0), coalesce(sum(status = 'ok'), 0), "
             "coalesce(sum(status = 'error'), 0), coalesce(sum(status = 'interrupted'), 0)")
_SLOT_RUN_SUMS = ("coalesce(sum(runs), 0), coalesce(sum(runs_running), 0), coalesce(sum(runs_ok), 0), "
                  "coalesce(sum(runs_error), 0), coalesce(sum(runs_interrupted), 0)")


@dataclass(frozen=True, slots=True)
class _Split:
    """A window as whole 15-minute slots (read from rollups) plus partial edges (read from rows)."""

    slot_lo: int | None
    slot_hi: int | None
    edges: tuple[tuple[int | None, int | None], ...]


def _split(w: Window) -> _Split:
    lo = None if w.since is None else -(-w.since // _SLOT) * _SLOT
    hi = None if w.until is None else (w.until + 1) // _SLOT * _SLOT - _SLOT
    if lo is not None and hi is not None and lo > hi:
        return _Split(0, -1, ((w.since, w.until),))
    edges = []
    if w.since is not None and w.since < lo:
        edges.append((w.since, lo - 1))
    if w.until is not None and w.until >= hi + _SLOT:
        edges.append((hi + _SLOT, w.until))
    return _Split(lo, hi, tuple(edges))


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


def _add(a: list, b: tuple) -> list:
    return [x + y for x, y in zip(a, b)]


def _windowed(conn: apsw.Connection, w: Window, rollup: str, rollup_sums: str, base: str, base_sums: str,
              base_time: str, base_agent: str) -> list[int]:
    """Sums over a window: whole slots from ``rollup``, partial edge slots from the ``base`` rows."""
    sp = _split(w)
    params: list = []
    cond = _between("slot_ms", sp.slot_lo, sp.slot_hi, params) + _agent("agent_id", w, params)
    total = list(conn.execute(f"SELECT {rollup_sums} FROM {rollup} WHERE {cond}", params).fetchall()[0])
    for lo, hi in sp.edges:
        params = []
        cond = _between(base_time, lo, hi, params) + _agent(base_agent, w, params)
        total = _add(total, conn.execute(f"SELECT {base_sums} FROM {base} WHERE {cond}", params).fetchall()[0])
    return total


def _fallback_cost(conn: apsw.Connection, w: Window, session_ids: list[str] | None = None) -> dict[str | None, int]:
    """Snapshot costs of runs without per-call costs, by session."""
    params: list = []
    cond = _between("f.ts_ms", w.since, w.until, params) + _agent("f.agent_id", w, params)
    if session_ids is not None:
        cond += " AND f.session_id IN (SELECT value FROM json_each(?))"
        params.append(orjson.dumps(session_ids).decode())
    rows = conn.execute(
        f"SELECT f.session_id, sum(f.cost_pico) FROM ({_SNAPSHOT_FALLBACK}) AS f WHERE {cond} GROUP BY 1", params)
    return {sid: cost or 0 for sid, cost in rows}


def sessions(conn: apsw.Connection, w: Window) -> list[dict]:
    params: list = []
    cond = _between("s.last_ms", w.since, None, params) + " AND " + _between("s.first_ms", None, w.until, params)
    cond += _agent("s.agent_id", w, params)
    limit = ""
    if w.limit is not None:
        limit = "LIMIT ?"
        params.append(w.limit)
    sql = f"""
    SELECT s.session_key, s.session_id, s.agent_id, s.source, s.status, coalesce(s.started_ms, s.first_ms),
           s.ended_ms, s.first_ms, s.last_ms, {_SUBAGENT_SESSION},
           coalesce(t.runs, 0), coalesce(t.llm_calls, 0) - coalesce(t.llm_errors, 0), coalesce(t.llm_errors, 0),
           coalesce(t.tool_calls, 0), coalesce(t.tool_errors, 0), coalesce(t.input_tokens, 0),
           coalesce(t.output_tokens, 0), coalesce(t.cache_read_tokens, 0), coalesce(t.cache_write_tokens, 0),
           coalesce(t.total_tokens, 0), coalesce(t.cost_pico, 0), coalesce(t.unpriced_calls, 0)
    FROM sessions AS s LEFT JOIN session_totals AS t ON t.session_id = s.session_id
    WHERE {cond}
    ORDER BY s.last_ms DESC, s.session_id
    {limit}
    """
    rows = conn.execute(sql, params).fetchall()
    fallback = _fallback_cost(conn, Window(), [r[1] for r in rows]) if rows else {}
    out = []
    for (key, sid, agent, source, status, started, ended, first, last, is_sub, runs, llm, llm_err, tools,
         tool_err, i, o, cr, cw, t, cost, unpriced) in rows:
        out.append({
            "session_key": key, "session_id": sid, "agent_id": agent, "source": source, "status": status,
            "started_at": iso(started), "ended_at": iso(ended), "first_activity_at": iso(first),
            "last_activity_at": iso(last), "duration_s": round((last - first) / 1000, 3),
            "is_subagent": bool(is_sub),
            "runs": runs, "llm_calls": llm, "llm_errors": llm_err, "tool_calls": tools, "tool_errors": tool_err,
            "input_tokens": i, "output_tokens": o, "cache_read_tokens": cr, "cache_write_tokens": cw,
            "total_tokens": t, "cost_usd": _usd(cost + fallback.get(sid, 0)), "unpriced_calls": unpriced,
        })
    return out


def usage(conn: apsw.Connection, w: Window) -> dict:
    llm = _windowed(conn, w, "usage_slots", _SLOT_LLM_SUMS, "llm_calls", _LLM_SUMS, "ts_ms", "agent_id")
    runs = _windowed(conn, w, "usage_slots", _SLOT_RUN_SUMS, "runs", _RUN_SUMS,
                     "coalesce(started_ms, ended_ms)", "agent_id")
    tools = _windowed(conn, w, "tool_slots", "coalesce(sum(calls), 0), coalesce(sum(errors), 0)", "tool_calls",
                      "count(*), coalesce(sum(status = 'error'), 0)", "coalesce(started_ms, ended_ms)", "agent_id")
    fallback = sum(_fallback_cost(conn, w).values())

    def count(sql: str, column: str, agent_column: str) -> int:
        params: list = []
        cond = _between(column, w.since, w.until, params) + _agent(agent_column, w, params)
        return conn.execute(sql.format(cond=cond), params).fetchall()[0][0]

    sess = count(f"SELECT coalesce(sum(NOT {_SUBAGENT_SESSION}), 0) FROM sessions AS s WHERE {{cond}}",
                 "s.first_ms", "s.agent_id")
    sub_sess = count(f"SELECT coalesce(sum({_SUBAGENT_SESSION}), 0) FROM sessions AS s WHERE {{cond}}",
                     "s.first_ms", "s.agent_id")
    subagents = count("SELECT count(*) FROM subagents WHERE {cond}", "coalesce(spawned_ms, ended_ms)",
                      "child_agent_id")
    compactions = count("SELECT count(*) FROM compactions WHERE phase = 'start' AND {cond}", "ts_ms", "agent_id")
    params: list = []
    rejected = conn.execute(f"SELECT count(*) FROM rejects WHERE {_between('ts_ms', w.since, w.until, params)}",
                            params).fetchall()[0][0] if w.since is not None or w.until is not None else \
        conn.execute("SELECT count(*) FROM rejects").fetchall()[0][0]
    calls, errors, i, o, cr, cw, t, cost, unpriced = llm
    return {
        "sessions": sess, "subagent_sessions": sub_sess, "runs": runs[0], "interrupted_runs": runs[4],
        "open_runs": runs[1], "failed_runs": runs[3],
        "llm_calls": calls - errors, "llm_errors": errors, "tool_calls": tools[0], "tool_errors": tools[1],
        "subagents": subagents, "compactions": compactions, "rejected_lines": rejected,
        "unpriced_calls": unpriced,
        "input_tokens": i, "output_tokens": o, "cache_read_tokens": cr, "cache_write_tokens": cw,
        "total_tokens": t, "cost_usd": _usd(cost + fallback),
    }


GROUP_BY = ("model", "provider", "agent", "session", "day", "tool")


def costs(conn: apsw.Connection, w: Window, group_by: str, tz: str = "UTC") -> list[dict]:
    """Spend grouped by one dimension; rows by cost, most first (days in order)."""
    if group_by not in GROUP_BY:
        raise ValueError(f"cannot group by {group_by!r}: choose one of {', '.join(GROUP_BY)}")
    if group_by == "tool":
        return _tool_costs(conn, w)
    if group_by == "session":
        rows = sessions(conn, Window(since=w.since, until=w.until, agent=w.agent))
        out = [{"session_key": r["session_key"], "session_id": r["session_id"], "llm_calls": r["llm_calls"],
                **{k: r[k] for k in _TOKEN_KEYS}, "cost_usd": r["cost_usd"]} for r in rows]
        out.sort(key=lambda r: -r["cost_usd"])
        return out[: w.limit] if w.limit else out
    dims = {"model": "model", "provider": "provider", "agent": "agent_id", "day": "slot_ms"}
    column = dims[group_by]
    sp = _split(w)
    groups: dict = {}

    def absorb(rows) -> None:
        for key, *vals in rows:
            acc = groups.get(key)
            groups[key] = list(vals) if acc is None else _add(acc, vals)

    params: list = []
    cond = _between("slot_ms", sp.slot_lo, sp.slot_hi, params) + _agent("agent_id", w, params)
    absorb(conn.execute(f"SELECT {column}, {_SLOT_LLM_SUMS} FROM usage_slots WHERE {cond} GROUP BY 1", params))
    base_column = {"model": "coalesce(model, '')", "provider": "coalesce(provider, '')",
                   "agent": "coalesce(agent_id, '')", "day": f"ts_ms - ts_ms % {_SLOT}"}[group_by]
    for lo, hi in sp.edges:
        params = []
        cond = _between("ts_ms", lo, hi, params) + _agent("agent_id", w, params)
        absorb(conn.execute(f"SELECT {base_column}, {_LLM_SUMS} FROM llm_calls WHERE {cond} GROUP BY 1", params))
    if group_by == "day":
        groups = _by_local_day(groups, tz)
    label = {"agent": "agent_id", "day": "day"}.get(group_by, group_by)
    out = []
    for key, (calls, errors, i, o, cr, cw, t, cost, unpriced) in groups.items():
        out.append({label: key if key != "" else None, "llm_calls": calls - errors, "llm_errors": errors,
                    "input_tokens": i, "output_tokens": o, "cache_read_tokens": cr, "cache_write_tokens": cw,
                    "total_tokens": t, "cost_usd": _usd(cost), "unpriced_calls": unpriced})
    if group_by == "day":
        out.sort(key=lambda r: r["day"])
    else:
        out.sort(key=lambda r: (-r["cost_usd"], str(r[label])))
    return out[: w.limit] if w.limit else out


def _by_local_day(groups: dict, tz: str) -> dict:
    zone = _zone(tz)
    days: dict = {}
    for slot_ms, vals in groups.items():
        day = dt.datetime.fromtimestamp(slot_ms / 1000, tz=zone).date().isoformat()
        acc = days.get(day)
        days[day] = list(vals) if acc is None else _add(acc, vals)
    return days


def _zone(tz: str) -> dt.tzinfo:
    if tz.upper() == "UTC":
        return dt.timezone.utc
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {tz!r}: use an IANA name such as Europe/Berlin or UTC") from None


def _tool_costs(conn: apsw.Connection, w: Window) -> list[dict]:
    """Tools carry no cost of their own: calls, errors and time spent, by tool."""
    sp = _split(w)
    groups: dict = {}
    params: list = []
    cond = _between("slot_ms", sp.slot_lo, sp.slot_hi, params) + _agent("agent_id", w, params)
    for name, calls, errors, duration in conn.execute(
            f"SELECT tool_name, sum(calls), sum(errors), sum(duration_ms) FROM tool_slots WHERE {cond} GROUP BY 1",
            params):
        groups[name] = [calls, errors, duration]
    for lo, hi in sp.edges:
        params = []
        cond = _between("coalesce(started_ms, ended_ms)", lo, hi, params) + _agent("agent_id", w, params)
        for name, *vals in conn.execute(
                "SELECT coalesce(tool_name, ''), count(*), sum(status = 'error'), sum(coalesce(duration_ms, 0)) "
                f"FROM tool_calls WHERE {cond} GROUP BY 1", params):
            groups[name] = _add(groups.get(name, [0, 0, 0]), vals)
    out = [{"tool": name or None, "calls": c, "errors": e, "duration_s": round(d / 1000, 3)}
           for name, (c, e, d) in groups.items() if c]
    out.sort(key=lambda r: (-r["calls"], str(r["tool"])))
    return out[: w.limit] if w.limit else out


def printable(data: bytes) -> str:
    """Bytes shown safely: undecodable bytes and control characters as escapes."""
    text = data.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def rejects(conn: apsw.Connection, w: Window) -> list[dict]:
    params: list = []
    cond = _range("ts_ms", w, params)
    limit = ""
    if w.limit is not None:
        limit = "LIMIT ?"
        params.append(w.limit)
    rows = conn.execute(
        f"SELECT path, offset, length, reason, head, ts_ms FROM rejects WHERE {cond} ORDER BY path, offset {limit}",
        params,
    )
    return [
        {"path": path, "offset": off, "length": length, "reason": reason,
         "head": printable(bytes(head))[:120], "read_at": iso(ts)}
        for path, off, length, reason, head, ts in rows
    ]


def file_status(conn: apsw.Connection) -> list[dict]:
    rows = conn.execute(
        "SELECT source, path, status, offset, size, lines, lost_bytes, updated_ms FROM files ORDER BY source, path"
    )
    return [
        {"source": s, "path": p, "status": st, "offset": off, "size": size, "lines": lines,
         "lost_bytes": lost, "updated_at": iso(ts)}
        for s, p, st, off, size, lines, lost, ts in rows
    ]
