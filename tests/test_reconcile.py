"""Runs, tool calls and subagents that never end become interrupted; a late end still wins."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import orjson
from conftest import ingest
from ledgerdump import scalar
from logwriter import LogDir

from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.verify import check_rollups
from agentledger.ledger.writer import LedgerWriter


def _cli(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args], capture_output=True,
                          text=True, timeout=60)


def _ev(n: int, ts: int, kind: str, data: dict, **env) -> bytes:
    base = {"id": f"evt_{n:016x}", "ts": ts, "seq": n, "agentId": "main", "sessionKey": "agent:main:main",
            "sessionId": "S", "runId": "R", "kind": kind, "data": data, "source": "hook"}
    base.update(env)
    return orjson.dumps(base) + b"\n"


def _verify(db: Path) -> None:
    conn = open_reader(db)
    try:
        assert check_rollups(conn) == []
    finally:
        conn.close()


def test_corpus_orphans_become_interrupted(tmp_path, oc_corpus, oc_expected):
    db = tmp_path / "l.db"
    out = _cli(db, "ingest", "--json", str(oc_corpus))
    summary = json.loads(out.stdout)
    t = oc_expected["totals"]
    assert summary["interrupted_runs"] == t["orphaned_runs"]
    assert summary["interrupted_tool_calls"] == t["orphaned_tool_calls"]
    usage = json.loads(_cli(db, "usage", "--json").stdout)
    assert (usage["interrupted_runs"], usage["open_runs"]) == (t["orphaned_runs"], 0)
    _verify(db)
    again = json.loads(_cli(db, "ingest", "--json", str(oc_corpus)).stdout)
    assert again["interrupted_runs"] == 0  # idempotent


def test_a_late_end_overrides_interrupted(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    t0 = 1_790_000_000_000
    logs.append(_ev(1, t0, "run.start", {"model": "m", "provider": "p"})
                + _ev(2, t0 + 5, "tool.start", {"toolName": "exec", "toolCallId": "T"}, sessionId="unknown"))
    ingest(db, logs.root)
    conn = open_writer(db)
    done = reconcile(LedgerWriter(conn), now_ms=t0 + 3_600_000, grace_s=600)
    conn.close()
    assert (done.runs, done.tool_calls) == (1, 1)
    assert scalar(db, "SELECT sum(runs_interrupted) FROM usage_slots") == 1
    _verify(db)
    logs.append(_ev(3, t0 + 9_000_000, "tool.end", {"toolName": "exec", "toolCallId": "T", "isError": True},
                    sessionId="unknown")
                + _ev(4, t0 + 9_000_001, "run.end", {"model": "m", "provider": "p"}))
    ingest(db, logs.root)
    assert scalar(db, "SELECT status FROM runs") == "ok"
    assert scalar(db, "SELECT status FROM tool_calls") == "error"
    assert scalar(db, "SELECT sum(runs_interrupted) FROM usage_slots") == 0
    assert scalar(db, "SELECT sum(runs_ok) FROM usage_slots") == 1
    _verify(db)


def test_grace_is_respected(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    now = int(time.time() * 1000)
    logs.append(_ev(1, now - 60_000, "run.start", {"model": "m", "provider": "p"}))
    ingest(db, logs.root)
    conn = open_writer(db)
    writer = LedgerWriter(conn)
    assert reconcile(writer, now, grace_s=600).runs == 0
    assert reconcile(writer, now + 600_000, grace_s=600).runs == 1
    conn.close()
