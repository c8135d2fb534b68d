"""Rollups equal their recomputation from base rows, whatever order the events came in."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import apsw
import orjson
import pytest
from conftest import REPO, ingest
from ledgerdump import verify
from logwriter import LogDir, event, llm_call

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader, open_writer


def _lines(corpus: Path) -> list[bytes]:
    out = []
    for path in sorted(corpus.rglob("events*.jsonl")):
        out += path.read_bytes().splitlines(keepends=True)
    return out


def _totals(db: Path) -> tuple:
    conn = open_reader(db)
    try:
        return conn.execute(
            "SELECT (SELECT sum(cost_pico) FROM session_totals), (SELECT sum(tool_errors) FROM session_totals), "
            "(SELECT sum(runs) FROM session_totals), (SELECT sum(llm_calls) FROM usage_slots), "
            "(SELECT sum(runs_running + runs_interrupted) FROM usage_slots), (SELECT sum(calls) FROM tool_slots)"
        ).fetchall()[0]
    finally:
        conn.close()


def test_corpus_rollupsverify(tmp_path, oc_corpus, oc_expected):
    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    assert verify(db) == []
    t = oc_expected["totals"]
    assert _totals(db) == (t["cost_pico_usd"], t["failed_tool_calls"], t["runs"], t["llm_calls"],
                           t["orphaned_runs"], t["tool_calls"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shuffled_events_in_small_batches_give_the_same_rollups(tmp_path, oc_corpus, seed):
    lines = _lines(oc_corpus)
    random.Random(seed).shuffle(lines)
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(lines))
    db = tmp_path / "l.db"
    ingest(db, logs.root, batch_lines=37)
    assert verify(db) == []
    ref = tmp_path / "ref.db"
    ingest(ref, oc_corpus)
    assert _totals(db) == _totals(ref)


def test_verify_names_a_corrupted_rollup_and_exits_1(tmp_path, oc_corpus):
    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    ok = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "verify"], capture_output=True,
                        text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("ok")
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE usage_slots SET cost_pico = cost_pico + 1 "
                 "WHERE slot_ms = (SELECT min(slot_ms) FROM usage_slots)")
    conn.close()
    bad = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "verify"], capture_output=True,
                         text=True)
    assert bad.returncode == 1
    assert "usage_slots" in bad.stdout and "usage_slots" in bad.stderr


def test_verify_finds_a_checkpoint_off_a_line_boundary(tmp_path, oc_corpus):
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(_lines(oc_corpus)[:50]))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE files SET offset = offset - 3")
    conn.close()
    bad = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "verify"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "line boundary" in bad.stdout


def test_a_ledger_from_before_rollups_gets_them_filled(tmp_path, oc_corpus, oc_expected):
    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    # Turn it back into a version-1 ledger: base rows only.
    conn = apsw.Connection(str(db))
    created = [m for path in sorted((REPO / "schema").glob("*.sql")) if not path.name.startswith("0001")
               for m in re.findall(r"CREATE (?:UNIQUE )?(TABLE|INDEX) (\w+)", path.read_text())]
    for kind, name in created:
        if kind == "TABLE" and conn.execute("SELECT 1 FROM sqlite_schema WHERE name = ?", (name,)).fetchall():
            conn.execute(f"DROP TABLE {name}")
        elif conn.execute("SELECT 1 FROM sqlite_schema WHERE name = ?", (name,)).fetchall():
            conn.execute(f"DROP INDEX {name}")
    added = [m for path in sorted((REPO / "schema").glob("*.sql")) if not path.name.startswith("0001")
             for m in re.findall(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", path.read_text())]
    for table, column in added:
        if any(row[1] == column for row in conn.execute(f"PRAGMA table_info({table})")):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    open_writer(db).close()  # migrates to version 2, filling the rollups from the base rows
    assert verify(db) == []
    assert _totals(db)[0] == oc_expected["totals"]["cost_pico_usd"]


def _runless(line: bytes) -> bytes:
    """The same telemetry line with no run id: the run it belonged to is unknown."""
    ev = orjson.loads(line)
    del ev["runId"]
    return orjson.dumps(ev) + b"\n"


def test_a_tool_call_without_a_run_counts_in_the_session_its_line_names(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1) + b"".join(_runless(event(n, kind, {"toolName": "exec", "toolCallId": "call-1",
                                                                 "isError": True}))
                                       for n, kind in ((2, "tool.start"), (3, "tool.end"))))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    assert verify(db) == []
    conn = open_reader(db)
    try:
        (s1,) = queries.sessions(conn, queries.Window())
        u = queries.usage(conn, queries.Window())
    finally:
        conn.close()
    assert (s1["session_id"], s1["runs"], s1["tool_calls"], s1["tool_errors"]) == ("sid-s1", 0, 1, 1)
    assert (u["tool_calls"], u["tool_errors"]) == (1, 1)
