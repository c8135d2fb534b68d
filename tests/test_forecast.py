"""Burn rates and projected trips: the math on synthetic series, then through a real daemon's API."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from logwriter import LogDir, event
from served import serve
from serving import write_config

from agentledger.forecast import (
    WINDOW_MS,
    rate_per_hour,
    seconds_to_limit,
    trend_per_hour,
)

NOW = 1_790_000_000_000


def _steady(gap_ms: float, amount: float, phase: float, now: int = NOW) -> tuple[list[int], list[float]]:
    """A constant pace: ``amount`` every ``gap_ms`` for longer than the window, the last one
    ``phase`` of a gap before ``now``."""
    last = now - phase * gap_ms
    times = [round(last - k * gap_ms) for k in range(int(2 * WINDOW_MS / gap_ms))][::-1]
    return times, [amount] * len(times)


@given(gap_s=st.floats(1, 60), amount=st.floats(1e-4, 10), phase=st.floats(0, 0.999),
       headroom_hours=st.floats(0.01, 100))
def test_a_constant_pace_projects_the_trip_within_five_percent(gap_s, amount, phase, headroom_hours):
    times, amounts = _steady(gap_s * 1000, amount, phase)
    true_rate = amount / gap_s * 3600
    limit = 1000.0
    value = limit - true_rate * headroom_hours
    projected = seconds_to_limit(value, limit, trend_per_hour(times, amounts, NOW))
    assert projected == pytest.approx(headroom_hours * 3600, rel=0.05)


@given(gap_s=st.floats(1, 60), amount=st.floats(1e-4, 10))
def test_the_burn_rate_is_the_window_spend_per_hour(gap_s, amount):
    times, amounts = _steady(gap_s * 1000, amount, 0.0)
    inside = sum(1 for t in times if t > NOW - WINDOW_MS)
    assert rate_per_hour(times, amounts, NOW) == pytest.approx(inside * amount * 6)


def test_flat_spend_has_no_projection():
    times, amounts = _steady(15_000, 0.05, 0.0, now=NOW - WINDOW_MS - 1)  # all before the window
    assert trend_per_hour(times, amounts, NOW) is None
    assert rate_per_hour(times, amounts, NOW) == 0
    assert seconds_to_limit(1.0, 5.0, trend_per_hour(times, amounts, NOW)) is None
    zero_cost = [0.0] * len(times)
    assert trend_per_hour(times, zero_cost, NOW + WINDOW_MS) is None  # calls that cost nothing
    assert trend_per_hour([NOW - 1000], [1.0], NOW) is None  # one step is no trend
    assert trend_per_hour([], [], NOW) is None


def test_the_pace_falls_once_spending_stops_and_a_reached_limit_has_tripped():
    times, amounts = _steady(10_000, 0.1, 0.0)
    running = trend_per_hour(times, amounts, NOW)
    assert running == pytest.approx(36.0, rel=0.01)
    later = [trend_per_hour(times, amounts, NOW + minutes * 60_000) for minutes in (1, 3, 6, 9)]
    assert running > later[0] > later[1] > later[2] > later[3]
    assert trend_per_hour(times, amounts, NOW + WINDOW_MS) is None  # nothing left in the window
    assert seconds_to_limit(5.0, 5.0, running) == 0.0
    assert seconds_to_limit(6.0, 5.0, None) == 0.0


# -- through the daemon ---------------------------------------------------------------------------

FORECAST_GATES = """
[[gates]]
name = "session-cost"
scope = "session"
metric = "cost_usd"
limit = 5.0

[[gates]]
name = "agent-calls"
scope = "agent-day"
metric = "llm_calls"
limit = 100000

[[gates]]
name = "fleet-day"
scope = "global-day"
metric = "cost_usd"
limit = 100000.0
"""


def _call(n: int, session: str, ts: int, cost: float) -> bytes:
    return event(n, "llm.call", {"callIndex": n, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                 "delta": {"input": 60, "output": 40, "cacheRead": 0, "cacheWrite": 0, "total": 100},
                                 "costUsd": cost}, session=session, ts=ts)


@pytest.fixture
def daemon(tmp_path):
    now = time.time_ns() // 1_000_000
    logs = LogDir(tmp_path / "logs")
    for k in range(40):  # $0.05 every 15 s, the last one now: $12/h, $2 so far
        logs.append(_call(k, "steady", now - (39 - k) * 15_000, 0.05))
    for k in range(10):  # spent two hours ago, nothing since
        logs.append(_call(100 + k, "idle", now - 7_200_000 + k * 1000, 0.25))
    served = serve(write_config(tmp_path, logs.root, extra=FORECAST_GATES))
    yield served
    served.stop()


def test_forecast_endpoint_projects_the_trip_of_a_steady_session(daemon):
    status, body = daemon.get("/v1/sessions/agent:main:steady/forecast")
    assert status == 200, body
    assert (body["session_key"], body["cost_usd"]) == ("agent:main:steady", 2.0)
    assert body["burn_usd_per_hour"] == pytest.approx(12.0, rel=0.05)
    gates = {g["gate"]: g for g in body["gates"]}
    session = gates["session-cost"]
    assert (session["value"], session["headroom"], session["tripped"]) == (2.0, 3.0, False)
    assert session["rate_per_hour"] == pytest.approx(12.0, rel=0.05)
    assert session["trips_in_s"] == pytest.approx(900, rel=0.05)  # $3 left at $12/h
    assert gates["agent-calls"]["rate_per_hour"] == pytest.approx(240, rel=0.05)  # 40 calls in 10 minutes
    # A count's limit is whole, as a gate decision tells it: the forecast told 100000.0.
    assert (gates["agent-calls"]["limit"], type(gates["agent-calls"]["limit"])) == (100000, int)
    assert type(gates["agent-calls"]["headroom"]) is int
    # At this pace the day's budget starts again long before it would be reached.
    assert (gates["fleet-day"]["resets_first"], gates["fleet-day"]["trips_in_s"]) == (True, None)


def test_flat_spend_gives_no_projection_and_an_unknown_session_is_404(daemon):
    status, body = daemon.get("/v1/sessions/agent:main:idle/forecast")
    assert status == 200
    assert (body["cost_usd"], body["burn_usd_per_hour"], body["tokens_per_minute"]) == (2.5, 0.0, 0.0)
    session = next(g for g in body["gates"] if g["gate"] == "session-cost")
    assert (session["rate_per_hour"], session["trips_in_s"], session["trips_at"]) == (None, None, None)
    assert daemon.get("/v1/sessions/agent:main:nobody/forecast")[0] == 404


def test_overview_lists_the_latest_sessions_with_their_pace(daemon):
    status, body = daemon.get("/v1/overview?limit=5")
    assert status == 200
    assert [s["session_key"] for s in body["sessions"]] == ["agent:main:steady", "agent:main:idle"]
    steady = body["sessions"][0]
    assert steady["tokens_per_minute"] == pytest.approx(400, rel=0.05)  # 100 tokens every 15 s
    assert body["total_usd"] == 4.5
    assert [(s["source"], s["lines_indexed"], s["lines_rejected"]) for s in body["ingest"]] == [
        ("oc-telemetry", 50, 0)]
    for bad in ("0", "51"):  # the range the overview takes, told as it is
        assert daemon.get(f"/v1/overview?limit={bad}") == (400, {"error": "limit must be a whole number from 1 to 50"})
