"""A run's usage.snapshot cost is a fallback for runs without per-call facts, never added on top."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest
from conftest import ingest
from logwriter import LogDir

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader

T = 1_790_000_000_000


def ev(n: int, kind: str, data: dict, **env) -> bytes:
    base = {"id": f"evt_{n:016x}", "ts": T + n * 1000, "seq": n, "agentId": "main",
            "sessionKey": "agent:main:main", "sessionId": "S", "kind": kind, "data": data, "source": "hook"}
    base.update(env)
    return orjson.dumps(base) + b"\n"


def snapshot(n: int, cost: float) -> bytes:
    return ev(n, "usage.snapshot", {"provider": "p", "model": "m", "costUsd": cost,
                                    "usage": {"input": 1, "output": 1, "total": 2}}, agentId="unknown")


def run(n: int, run_id: str, *, calls: list[float], snap: float) -> bytes:
    out = ev(n, "run.start", {"model": "m", "provider": "p"}, runId=run_id)
    for i, c in enumerate(calls):
        out += ev(n + 1 + i, "llm.call", {"callIndex": i, "provider": "p", "model": "m", "costUsd": c,
                                          "delta": {"input": 1, "output": 1, "total": 2}},
                  runId=run_id, agentId="unknown")
    k = n + 1 + len(calls)
    return out + snapshot(k, snap) + ev(k + 1, "run.end", {"model": "m", "provider": "p"}, runId=run_id)


@pytest.mark.parametrize("order", ["in order", "reversed"])
def test_snapshot_cost_only_for_runs_without_calls(tmp_path, db, order):
    logs = LogDir(tmp_path / "state")
    lines = [run(10, "R1", calls=[0.25, 0.5], snap=0.75) + run(30, "R2", calls=[], snap=2.0)]
    data = b"".join(lines)
    if order == "reversed":
        data = b"".join(reversed(data.splitlines(keepends=True)))
    logs.append(data)
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        u = queries.usage(conn, queries.Window())
        (s,) = queries.sessions(conn, queries.Window())
    finally:
        conn.close()
    # R1: its two calls (0.75); R2: no calls, so its snapshot (2.0). Never 0.75 + 0.75 + 2.0.
    assert u["cost_usd"] == pytest.approx(2.75)
    assert s["cost_usd"] == pytest.approx(2.75)
    assert u["llm_calls"] == 2 and u["runs"] == 2


def test_runs_cost_what_they_count_in_every_total(tmp_path, db):
    """A run without model calls costs its snapshot in the runs list, one run, top runs and a session's runs,
    as it does in usage: the runs' costs add up to usage's."""
    logs = LogDir(tmp_path / "state")
    logs.append(run(10, "R1", calls=[0.25, 0.5], snap=0.75) + run(30, "R2", calls=[], snap=2.0))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        w = queries.Window()
        by_id = {r["run_id"]: r["cost_usd"] for r in queries.runs(conn, w)}
        assert by_id == {"R1": pytest.approx(0.75), "R2": pytest.approx(2.0)}
        assert sum(by_id.values()) == pytest.approx(queries.usage(conn, w)["cost_usd"])
        assert queries.run_detail(conn, "R2")["cost_usd"] == pytest.approx(2.0)
        assert [r["run_id"] for r in queries.top(conn, w, "runs")] == ["R2", "R1"]
        detail = queries.session_detail(conn, "agent:main:main")
        assert {r["run_id"]: r["cost_usd"] for r in detail["runs"]} == by_id
    finally:
        conn.close()


@pytest.mark.parametrize(("first", "second", "want"), [
    ({"calls": [], "snap": 1.0}, {"calls": [], "snap": 2.0}, 3.0),
    ({"calls": [], "snap": 1.0}, {"calls": [5.0], "snap": 5.0}, 6.0),
])
def test_a_snapshot_is_the_fallback_of_its_own_run_only(tmp_path, db, first, second, want):
    """A snapshot up to a minute after a run's end may be that run's: not once the session's next run began."""
    logs = LogDir(tmp_path / "state")
    logs.append(run(10, "R1", **first) + run(20, "R2", **second))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        assert queries.usage(conn, queries.Window())["cost_usd"] == pytest.approx(want)
        (s,) = queries.sessions(conn, queries.Window())
        assert s["cost_usd"] == pytest.approx(want)
    finally:
        conn.close()


def test_a_run_read_without_its_start_still_falls_back_on_its_snapshot(tmp_path, db):
    """A log that begins mid-run holds the run's end (with its duration) and its snapshot, not its start."""
    logs = LogDir(tmp_path / "state")
    lines = run(10, "R1", calls=[], snap=0.75).splitlines(keepends=True)
    logs.append(b"".join(lines[1:-1]) + ev(12, "run.end", {"model": "m", "provider": "p", "durationMs": 2000},
                                          runId="R1"))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        assert queries.usage(conn, queries.Window())["cost_usd"] == pytest.approx(0.75)
    finally:
        conn.close()


@pytest.mark.parametrize("window", [{}, {"since": T + 30_000}, {"until": T + 29_000}, {"agent": "main"},
                                    {"since": T + 30_000, "until": T + 40_000}])
def test_every_grouping_adds_up_to_usage(tmp_path, db, window):
    logs = LogDir(tmp_path / "state")
    logs.append(run(10, "R1", calls=[0.25, 0.5], snap=0.75) + run(30, "R2", calls=[], snap=2.0))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        w = queries.Window(**window)
        want = queries.usage(conn, w)["cost_usd"]
        for group_by in ("model", "provider", "agent", "session", "day"):
            rows = queries.costs(conn, w, group_by, "Asia/Tokyo")
            assert sum(r["cost_usd"] for r in rows) == pytest.approx(want), group_by
        assert sum(r["cost_usd"] for r in queries.daily_costs_by_model(conn, w)) == pytest.approx(want)
        assert sum(r["cost_usd"] for r in queries.top(conn, w, "models")) == pytest.approx(want)
        if "since" in window:  # only R2, which has no model calls: its snapshot's cost, under its model
            assert queries.costs(conn, w, "model") == [{
                "model": "m", "llm_calls": 0, "llm_errors": 0, "input_tokens": 0, "output_tokens": 0,
                "cache_read_tokens": 0, "cache_write_tokens": 0, "total_tokens": 0, "cost_usd": 2.0,
                "unpriced_calls": 0}]
    finally:
        conn.close()


def test_a_session_known_only_by_its_id(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    lines = [orjson.loads(line) for line in
             (run(10, "R1", calls=[0.25], snap=0.25) + run(30, "R2", calls=[], snap=2.0)).splitlines()]
    logs.append(b"".join(orjson.dumps({k: v for k, v in line.items() if k != "sessionKey"}) + b"\n"
                         for line in lines))
    ingest(db, logs.root)

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    detail = orjson.loads(cli("session", "S", "--json"))
    assert detail["session_key"] is None and detail["cost_usd"] == pytest.approx(2.25)
    assert cli("session", "S").splitlines()[0].split() == ["session", "S"]
    node = orjson.loads(cli("tree", "S", "--json"))
    assert node["own_cost_usd"] == pytest.approx(2.25) and node["cumulative_cost_usd"] == pytest.approx(2.25)


def test_a_sessions_cost_by_model_adds_up_to_its_cost(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(run(10, "R1", calls=[0.25, 0.5], snap=0.75) + run(30, "R2", calls=[], snap=2.0))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        d = queries.session_detail(conn, "agent:main:main")
    finally:
        conn.close()
    assert [(r["model"], r["llm_calls"], r["cost_usd"]) for r in d["cost_by_model"]] == [("m", 2, 2.75)]
    assert d["cost_usd"] == pytest.approx(2.75)
