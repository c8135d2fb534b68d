"""One snapshot of where the money is going now: what ``watch`` draws and ``GET /v1/overview`` answers."""

from __future__ import annotations

from collections.abc import Sequence
from zoneinfo import ZoneInfo

import apsw

from agentledger.config import GateConfig
from agentledger.forecast import Forecaster
from agentledger.ledger import queries
from agentledger.timeutil import iso


PROBLEMS_FOR_MS = 7 * 86_400_000  # how far back "latest failures" look unless told


def overview(conn: apsw.Connection, gates: Sequence[GateConfig], zone: ZoneInfo, now_ms: int, *,
             sessions: int = 8, problems: int = 8, problems_since: int | None = None,
             problems_until: int | None = None) -> dict:
    """The latest sessions (most recent activity first) with burn rates and gate forecasts, the
    latest failed or interrupted runs and tool calls (of the last week unless ``problems_since``, up to
    ``problems_until`` when given),
    spend today and in all, and ingest health."""
    with conn:  # one snapshot, the parts agreeing with each other, whether or not the caller holds one
        forecaster = Forecaster(conn, gates, zone, now_ms)
        rows, seen = [], set()
        for s in queries.sessions(conn, queries.Window(limit=sessions * 2)):
            key = s["session_key"] or s["session_id"]
            if key in seen or len(rows) == sessions:
                continue  # an earlier instance of a session already listed (a reset)
            seen.add(key)
            rows.append({**forecaster.session(key), "last_activity_at": s["last_activity_at"],
                         "llm_calls": s["llm_calls"], "tool_errors": s["tool_errors"]})
        start, end = forecaster.day
        today = queries.usage(conn, queries.Window(since=start, until=end - 1))
        total = queries.usage(conn, queries.Window())
        return {
            "at": iso(now_ms), "timezone": zone.key, "window_s": forecaster.window_ms // 1000,
            "today_usd": today["cost_usd"], "today_unpriced_calls": today["unpriced_calls"],
            "total_usd": total["cost_usd"], "total_unpriced_calls": total["unpriced_calls"],
            "sessions": rows,
            "problems": queries.recent_problems(
                conn, problems, now_ms - PROBLEMS_FOR_MS if problems_since is None else problems_since,
                problems_until),
            "ingest": queries.ingest_health(conn, now_ms),
        }

