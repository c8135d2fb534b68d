"""Burn rates and projections: how fast spend grows, and when a gate would trip at that pace.

The math is plain functions over (time, amount) series; ``Forecaster`` reads the series and
gate values from the ledger. ``watch``, the web page and ``GET /v1/sessions/{key}/forecast``
all answer through it, so they always agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from zoneinfo import ZoneInfo

import apsw
import numpy as np

from agentledger.config import GateConfig
from agentledger.gates import day_bounds, exact, matches, measure, shown_limit, threshold
from agentledger.ledger import queries
from agentledger.timeutil import iso
from agentledger.units import PICO_PER_USD

WINDOW_MS = 600_000  # "recent": the last ten minutes
_HOUR_MS = 3_600_000


def _inside(times_ms: Sequence[int], amounts: Sequence[float], now_ms: int,
            window_ms: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(times_ms, dtype=np.int64).reshape(-1)
    a = np.asarray(amounts, dtype=np.float64).reshape(-1)
    keep = (t > now_ms - window_ms) & (t <= now_ms)
    return t[keep], a[keep]


def rate_per_hour(times_ms: Sequence[int], amounts: Sequence[float], now_ms: int,
                  window_ms: int = WINDOW_MS) -> float:
    """What was added in the window, scaled to an hour (the burn rate)."""
    _, a = _inside(times_ms, amounts, now_ms, window_ms)
    return float(a.sum()) * _HOUR_MS / window_ms


def trend_per_hour(times_ms: Sequence[int], amounts: Sequence[float], now_ms: int,
                   window_ms: int = WINDOW_MS) -> float | None:
    """The current pace: slope of the least-squares line through the running total just before
    and just after each addition in the window, and at ``now_ms``. Steps of a constant pace sit
    evenly around that line, so it is exact for them, and once additions stop the point at
    ``now_ms`` pulls the slope down. None when the total grew fewer than twice in the window
    (one step is no trend; flat spend has none)."""
    t, a = _inside(times_ms, amounts, now_ms, window_ms)
    grew = a > 0
    if np.count_nonzero(grew) < 2 or np.ptp(t[grew]) == 0:
        return None
    t, a = t[grew], a[grew]
    after = np.cumsum(a)
    x = np.concatenate((t, t, [now_ms])).astype(np.float64)
    y = np.concatenate((after - a, after, after[-1:]))
    slope = float(np.polyfit((x - now_ms) / _HOUR_MS, y, 1)[0])
    return slope if slope > 0 else None


def seconds_to_limit(value: float, limit: float, per_hour: float | None) -> float | None:
    """When ``value`` growing at ``per_hour`` reaches ``limit``: 0 when it already has, None when
    it does not grow."""
    if value >= limit:
        return 0.0
    if not per_hour:
        return None
    return (limit - value) / per_hour * 3600


def unpriced_in(activity: dict[str, list[tuple]], now_ms: int, window_ms: int = WINDOW_MS) -> int:
    """The model calls in the window that have no price: a cost rate over it leaves them out."""
    _, flags = _inside([r[0] for r in activity["llm"]], [r[3] for r in activity["llm"]], now_ms, window_ms)
    return int(flags.sum())


def series(activity: dict[str, list[tuple]], metric: str) -> tuple[list[int], list[float]]:
    """The (times, amounts) by which a gate metric grows, from ``queries.activity``."""
    if metric == "cost_usd":
        return [r[0] for r in activity["llm"]], [r[1] / PICO_PER_USD for r in activity["llm"]]
    if metric == "tokens":
        return [r[0] for r in activity["llm"]], [r[2] for r in activity["llm"]]
    if metric == "llm_calls":
        return [r[0] for r in activity["llm"]], [1.0] * len(activity["llm"])
    if metric == "tool_calls":
        return [r[0] for r in activity["tools"]], [1.0] * len(activity["tools"])
    failed = [r for r in activity["tools"] if r[1]]  # tool_errors
    return [r[0] for r in failed], [1.0] * len(failed)


class Forecaster:
    """Forecasts at one instant over one read connection; day totals and agent activity are read
    once however many sessions share them."""

    def __init__(self, conn: apsw.Connection, gates: Sequence[GateConfig], zone: ZoneInfo, now_ms: int,
                 window_ms: int = WINDOW_MS):
        self.conn = conn
        self.gates = tuple(gates)
        self.zone = zone
        self.now_ms = now_ms
        self.window_ms = window_ms
        self.day = day_bounds(now_ms, zone)
        self._activity: dict[tuple, dict] = {}
        self._day_totals: dict[str | None, dict] = {}

    def activity(self, *, session_ids: list[str] | None = None, agent: str | None = None) -> dict:
        key = (tuple(session_ids) if session_ids is not None else None, agent)
        if key not in self._activity:
            self._activity[key] = queries.activity(self.conn, self.now_ms - self.window_ms, self.now_ms,
                                                   session_ids=session_ids, agent=agent)
        return self._activity[key]

    def day_totals(self, agent: str | None) -> dict:
        if agent not in self._day_totals:
            self._day_totals[agent] = queries.day_totals(self.conn, self.day[0], self.day[1] - 1, agent)
        return self._day_totals[agent]

    def session(self, key: str) -> dict:
        """A session's burn rate and, for each gate that applies to it, its headroom and projected trip."""
        view = queries.hot_session(self.conn, key)
        if view is None:
            raise queries.NotFound(f"no session {key!r} (give a session key or a session id)")
        own = self.activity(session_ids=[view["session_id"]])
        times, dollars = series(own, "cost_usd")
        tokens = series(own, "tokens")
        return {
            "session_key": view["session_key"], "session_id": view["session_id"], "agent_id": view["agent_id"],
            "status": view["status"], "at": iso(self.now_ms), "window_s": self.window_ms // 1000,
            "cost_usd": measure(view, "cost_usd"), "unpriced_calls": view["unpriced_calls"],
            "total_tokens": view["total_tokens"],
            "burn_usd_per_hour": round(rate_per_hour(times, dollars, self.now_ms, self.window_ms), 6),
            "recent_unpriced_calls": unpriced_in(own, self.now_ms, self.window_ms),
            "tokens_per_minute": round(rate_per_hour(*tokens, self.now_ms, self.window_ms) / 60, 3),
            "gates": [self._gate(g, view) for g in self.gates if matches(view["agent_id"] or "", g.agents)
                      and (g.scope != "agent-day" or view["agent_id"])],
        }

    def _gate(self, gate: GateConfig, view: dict) -> dict:
        day_end = None
        if gate.scope == "session":
            totals, act = view, self.activity(session_ids=[view["session_id"]])
        elif gate.scope == "session-family":
            ids = [view["session_id"]] + queries.family_session_ids(self.conn, view["session_key"], view["session_id"])
            totals, act = view["family"], self.activity(session_ids=ids)
        else:
            agent = view["agent_id"] if gate.scope == "agent-day" else None
            totals, act, day_end = self.day_totals(agent), self.activity(agent=agent), self.day[1]
        value = measure(totals, gate.metric)
        trend = trend_per_hour(*series(act, gate.metric), self.now_ms, self.window_ms)
        eta = seconds_to_limit(value, gate.limit, trend)
        resets_first = day_end is not None and eta is not None and self.now_ms + eta * 1000 >= day_end
        if resets_first:
            eta = None  # the day's budget starts again before the pace would reach it
        priced = gate.metric == "cost_usd"  # only a cost leaves out the calls with no price
        limit = shown_limit(gate)
        return {"gate": gate.name, "scope": gate.scope, "metric": gate.metric, "action": gate.action,
                "limit": limit, "value": value, "unpriced_calls": totals["unpriced_calls"] if priced else 0,
                "headroom": round(max(limit - value, 0), 6),
                "used": round(value / gate.limit, 6), "tripped": exact(totals, gate.metric) >= threshold(gate),
                "rate_per_hour": None if trend is None else round(trend, 6),
                "recent_unpriced_calls": unpriced_in(act, self.now_ms, self.window_ms) if priced else 0,
                "trips_in_s": None if eta is None else round(eta, 1),
                "trips_at": None if eta is None else iso(self.now_ms + round(eta * 1000)),
                "resets_first": resets_first}
