"""Every read the CLI and HTTP make, over a read-only connection, with bound parameters only."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

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
SELECT r.run_id, r.session_id, r.agent_id, r.started_ms, max(u.cost_pico) AS cost_pico
FROM runs AS r JOIN usage_snapshots AS u
  ON u.session_id = r.session_id
 AND u.ts_ms BETWEEN r.started_ms AND coalesce(r.ended_ms, r.started_ms) + 60000
WHERE NOT EXISTS (SELECT 1 FROM llm_calls AS l WHERE l.run_id = r.run_id)
GROUP BY r.run_id
"""


def sessions(conn: apsw.Connection, w: Window) -> list[dict]:
    params: list = []
    where = [f"s.last_ms >= ?" if w.since is not None else "1", f"s.first_ms <= ?" if w.until is not None else "1"]
    if w.since is not None:
        params.append(w.since)
    if w.until is not None:
        params.append(w.until)
    if w.agent:
        where.append("s.agent_id = ?")
        params.append(w.agent)
    limit = ""
    if w.limit is not None:
        limit = "LIMIT ?"
        params.append(w.limit)
    sql = f"""
    WITH l AS (
        SELECT session_id, count(*) AS n, sum(error IS NOT NULL) AS errors,
               sum(input_tokens) AS i, sum(output_tokens) AS o, sum(cache_read_tokens) AS cr,
               sum(cache_write_tokens) AS cw, sum(total_tokens) AS t, sum(cost_pico) AS c,
               sum(cost_pico IS NULL) AS unpriced
        FROM llm_calls GROUP BY session_id
    ), f AS (
        SELECT session_id, sum(cost_pico) AS c FROM ({_SNAPSHOT_FALLBACK}) GROUP BY session_id
    ), r AS (
        SELECT session_id, count(*) AS n FROM runs GROUP BY session_id
    ), a AS (
        SELECT r.session_id, min(ra.first_ms) AS first_ms, max(ra.last_ms) AS last_ms
        FROM run_activity AS ra JOIN runs AS r ON r.run_id = ra.run_id GROUP BY r.session_id
    ), t AS (
        SELECT r.session_id, count(*) AS n, sum(tc.status = 'error') AS errors
        FROM tool_calls AS tc JOIN runs AS r ON r.run_id = tc.run_id GROUP BY r.session_id
    )
    SELECT s.session_key, s.session_id, s.agent_id, s.source, s.status, coalesce(s.started_ms, s.first_ms),
           s.ended_ms, min(s.first_ms, coalesce(a.first_ms, s.first_ms)),
           max(s.last_ms, coalesce(a.last_ms, s.last_ms)), coalesce(r.n, 0), coalesce(l.n, 0), coalesce(l.errors, 0),
           coalesce(t.n, 0), coalesce(t.errors, 0),
           coalesce(l.i, 0), coalesce(l.o, 0), coalesce(l.cr, 0), coalesce(l.cw, 0), coalesce(l.t, 0),
           coalesce(l.c, 0) + coalesce(f.c, 0), coalesce(l.unpriced, 0), {_SUBAGENT_SESSION}
    FROM sessions AS s
    LEFT JOIN l ON l.session_id = s.session_id
    LEFT JOIN f ON f.session_id = s.session_id
    LEFT JOIN r ON r.session_id = s.session_id
    LEFT JOIN t ON t.session_id = s.session_id
    LEFT JOIN a ON a.session_id = s.session_id
    WHERE {" AND ".join(where)}
    ORDER BY s.last_ms DESC, s.session_id
    {limit}
    """
    out = []
    for row in conn.execute(sql, params):
        (key, sid, agent, source, status, started, ended, first, last, runs, llm, llm_err, tools, tool_err,
         i, o, cr, cw, t, cost, unpriced, is_sub) = row
        out.append({
            "session_key": key, "session_id": sid, "agent_id": agent, "source": source, "status": status,
            "started_at": iso(started), "ended_at": iso(ended), "first_activity_at": iso(first),
            "last_activity_at": iso(last), "is_subagent": bool(is_sub),
            "runs": runs, "llm_calls": llm, "llm_errors": llm_err, "tool_calls": tools, "tool_errors": tool_err,
            "input_tokens": i, "output_tokens": o, "cache_read_tokens": cr, "cache_write_tokens": cw,
            "total_tokens": t, "cost_usd": _usd(cost), "unpriced_calls": unpriced,
        })
    return out


def usage(conn: apsw.Connection, w: Window) -> dict:
    def one(sql: str, params: list) -> tuple:
        return conn.execute(sql, params).fetchall()[0]

    agent_llm = agent_run = agent_tool = agent_sess = agent_sub = agent_comp = ""
    p_llm: list = []
    r_llm = _range("ts_ms", w, p_llm)
    p_run: list = []
    r_run = _range("started_ms", w, p_run)
    p_tool: list = []
    r_tool = _range("coalesce(started_ms, ended_ms)", w, p_tool)
    p_sess: list = []
    r_sess = _range("coalesce(s.started_ms, s.first_ms)", w, p_sess)
    p_sub: list = []
    r_sub = _range("coalesce(spawned_ms, ended_ms)", w, p_sub)
    p_comp: list = []
    r_comp = _range("ts_ms", w, p_comp)
    p_fb: list = []
    r_fb = _range("f.started_ms", w, p_fb)
    if w.agent:
        agent_llm = agent_run = agent_tool = " AND agent_id = ?"
        agent_sess = " AND s.agent_id = ?"
        agent_sub = " AND child_agent_id = ?"
        agent_comp = " AND agent_id = ?"
        for p in (p_llm, p_run, p_tool, p_sess, p_sub, p_comp, p_fb):
            p.append(w.agent)
    llm = one(
        "SELECT count(*) - coalesce(sum(error IS NOT NULL), 0), coalesce(sum(error IS NOT NULL), 0), "
        "coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), coalesce(sum(cache_read_tokens), 0), "
        "coalesce(sum(cache_write_tokens), 0), coalesce(sum(total_tokens), 0), coalesce(sum(cost_pico), 0), "
        f"coalesce(sum(cost_pico IS NULL AND error IS NULL), 0) FROM llm_calls WHERE {r_llm}{agent_llm}",
        p_llm,
    )
    fallback = one(
        f"SELECT coalesce(sum(f.cost_pico), 0) FROM ({_SNAPSHOT_FALLBACK}) AS f "
        f"WHERE {r_fb}{' AND f.agent_id = ?' if w.agent else ''}",
        p_fb,
    )[0]
    runs = one(
        "SELECT count(*), coalesce(sum(status = 'interrupted'), 0), coalesce(sum(status = 'running'), 0), "
        f"coalesce(sum(status = 'error'), 0) FROM runs WHERE {r_run}{agent_run}",
        p_run,
    )
    tools = one(
        f"SELECT count(*), coalesce(sum(status = 'error'), 0) FROM tool_calls WHERE {r_tool}{agent_tool}",
        p_tool,
    )
    sess = one(
        f"SELECT coalesce(sum(NOT {_SUBAGENT_SESSION}), 0), coalesce(sum({_SUBAGENT_SESSION}), 0) "
        f"FROM sessions AS s WHERE {r_sess}{agent_sess}",
        p_sess,
    )
    subagents = one(f"SELECT count(*) FROM subagents WHERE {r_sub}{agent_sub}", p_sub)[0]
    compactions = one(
        f"SELECT count(*) FROM compactions WHERE phase = 'start' AND {r_comp}{agent_comp}", p_comp
    )[0]
    p_rej: list = []
    rejected = one(f"SELECT count(*) FROM rejects WHERE {_range('ts_ms', Window(), p_rej)}", p_rej)[0]
    calls, errors, i, o, cr, cw, t, cost, unpriced = llm
    return {
        "sessions": sess[0], "subagent_sessions": sess[1], "runs": runs[0], "interrupted_runs": runs[1],
        "open_runs": runs[2], "failed_runs": runs[3],
        "llm_calls": calls, "llm_errors": errors, "tool_calls": tools[0], "tool_errors": tools[1],
        "subagents": subagents, "compactions": compactions, "rejected_lines": rejected,
        "unpriced_calls": unpriced,
        "input_tokens": i, "output_tokens": o, "cache_read_tokens": cr, "cache_write_tokens": cw,
        "total_tokens": t, "cost_usd": _usd(cost + fallback),
    }


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
