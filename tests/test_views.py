"""The reads behind watch, the web page and forecasts, checked against the corpus and each other."""

from __future__ import annotations

import time

import pytest
from conftest import ingest

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.writer import LedgerWriter
from agentledger.timeutil import iso


@pytest.fixture(scope="module")
def conn(oc_corpus, tmp_path_factory):
    db = tmp_path_factory.mktemp("views") / "ledger.db"
    ingest(db, oc_corpus)
    writer = open_writer(db)
    reconcile(LedgerWriter(writer), time.time_ns() // 1_000_000)  # what never ended is interrupted by now
    writer.close()
    c = open_reader(db)
    yield c
    c.close()


def _sum(rows, key, value="cost_usd"):
    out: dict = {}
    for r in rows:
        out[r[key]] = round(out.get(r[key], 0) + r[value], 9)
    return out


@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata"])
def test_daily_costs_by_model_add_up_to_days_and_models(conn, tz):
    w = queries.Window(since=1_790_000_000_000 + 3_600_000)  # a window edge inside a 15-minute slot too
    local = queries.zone(tz)
    rows = queries.daily_costs_by_model(conn, w, local)
    assert _sum(rows, "day") == {r["day"]: round(r["cost_usd"], 9) for r in queries.costs(conn, w, "day", local)}
    assert _sum(rows, "model") == {r["model"]: round(r["cost_usd"], 9) for r in queries.costs(conn, w, "model")}
    assert _sum(rows, "day", "llm_calls") == {r["day"]: r["llm_calls"] for r in queries.costs(conn, w, "day", local)}
    assert [r["day"] for r in rows] == sorted(r["day"] for r in rows)


def test_recent_problems_are_the_latest_failures_and_interruptions(conn, oc_expected):
    everything = queries.recent_problems(conn, 10_000)
    failed = queries.errors(conn, queries.Window())
    interrupted_runs = queries.runs(conn, queries.Window(), status="interrupted")
    assert len(everything) == len(failed) + len(interrupted_runs) + oc_expected["totals"]["orphaned_tool_calls"]
    assert len(interrupted_runs) == oc_expected["totals"]["orphaned_runs"]
    assert [p["at"] for p in everything] == sorted((p["at"] for p in everything), reverse=True)
    assert queries.recent_problems(conn, 5) == everything[:5]
    since = 1_791_000_000_000
    assert queries.recent_problems(conn, 10_000, since) == [p for p in everything if p["at"] >= iso(since)]


def test_ingest_health_counts_every_line_and_the_lag(conn, oc_expected):
    (source,) = queries.ingest_health(conn, time.time_ns() // 1_000_000)
    malformed = oc_expected["lines"]["malformed"]["total"]
    assert (source["source"], source["lines_rejected"], source["unread_bytes"]) == ("oc-telemetry", malformed, 0)
    assert source["lines_indexed"] + malformed == oc_expected["lines"]["physical"]
    assert source["newest_event_at"].startswith("2026-10-05")
    assert source["lag_s"] > 86_400


def test_day_totals_count_failed_calls_once(conn):
    day = queries.day_totals(conn, 0, 2**62)
    usage = queries.usage(conn, queries.Window())
    assert (day["llm_calls"], day["llm_errors"]) == (usage["llm_calls"], usage["llm_errors"])
