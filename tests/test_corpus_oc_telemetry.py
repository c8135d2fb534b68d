"""The shared oc-telemetry corpus gives exactly the totals counted while it was written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, cli_env, cli_json, forbid_call_scans, ingest, listed_as_counted
from ledgerdump import dump, scalar, usage

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader
from agentledger.timeutil import parse_time


@pytest.fixture(scope="module")
def corpus_db(tmp_path_factory, oc_corpus) -> Path:
    db = tmp_path_factory.mktemp("corpus") / "ledger.db"
    ingest(db, oc_corpus)
    return db


def _sessions(db: Path) -> list[dict]:
    conn = open_reader(db)
    try:
        return queries.sessions(conn, queries.Window())
    finally:
        conn.close()


def test_totals_match_expected(corpus_db, oc_expected):
    t = oc_expected["totals"]
    u = usage(corpus_db)
    assert u["sessions"] == t["sessions"]
    assert u["subagent_sessions"] == t["subagent_sessions"]
    assert u["runs"] == t["runs"]
    # Orphans cut off by a gateway restart are interrupted as they are read; the rest wait for reconciliation.
    assert u["open_runs"] + u["interrupted_runs"] == t["orphaned_runs"]
    assert u["llm_calls"] == t["llm_calls"]
    assert u["tool_calls"] == t["tool_calls"]
    assert u["tool_errors"] == t["failed_tool_calls"]
    assert u["subagents"] == t["subagents"]
    assert u["compactions"] == t["compactions"]
    assert u["input_tokens"] == t["tokens"]["input"]
    assert u["output_tokens"] == t["tokens"]["output"]
    assert u["cache_read_tokens"] == t["tokens"]["cacheRead"]
    assert u["cache_write_tokens"] == t["tokens"]["cacheWrite"]
    assert u["total_tokens"] == t["tokens"]["total"]
    assert u["rejected_lines"] == oc_expected["lines"]["malformed"]["total"]
    assert scalar(corpus_db, "SELECT sum(cost_pico) FROM llm_calls") == t["cost_pico_usd"]
    assert u["cost_usd"] == pytest.approx(t["cost_usd"], abs=1e-9)
    assert u["failed_runs"] == oc_expected["detail"]["runs_with_error"]


def test_known_traps_are_avoided(corpus_db, oc_expected):
    traps = oc_expected["detail"]["traps"]
    u = usage(corpus_db)
    assert u["total_tokens"] != traps["tokens_total_if_llm_call_cumulative_is_summed"]
    assert u["cost_usd"] != pytest.approx(traps["cost_usd_if_usage_snapshot_cost_is_added_to_llm_call_cost"])


def test_every_record_is_an_event_and_each_kind_counts(corpus_db, oc_expected):
    assert scalar(corpus_db, "SELECT count(*) FROM events") == oc_expected["lines"]["records"]
    by_kind = dict(
        __import__("apsw").Connection(str(corpus_db)).execute("SELECT kind, count(*) FROM events GROUP BY kind")
    )
    assert by_kind == oc_expected["detail"]["events_by_kind"]


def test_per_model(corpus_db, oc_expected):
    conn = open_reader(corpus_db)
    rows = conn.execute(
        "SELECT model, count(*), sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), "
        "sum(cache_write_tokens), sum(total_tokens), sum(cost_pico) FROM llm_calls GROUP BY model"
    ).fetchall()
    conn.close()
    got = {m: dict(zip(("llm_calls", "input", "output", "cacheRead", "cacheWrite", "total", "cost_pico_usd"), r))
           for m, *r in rows}
    want = {m: {k: v[k] for k in ("llm_calls", "input", "output", "cacheRead", "cacheWrite", "total",
                                  "cost_pico_usd")} for m, v in oc_expected["per_model"].items()}
    assert got == want


def test_per_day_llm_spend_and_runs(corpus_db, oc_expected):
    conn = open_reader(corpus_db)
    llm = dict(conn.execute(
        "SELECT date(ts_ms / 1000, 'unixepoch'), sum(cost_pico) FROM llm_calls GROUP BY 1").fetchall())
    runs = dict(conn.execute(
        "SELECT date(started_ms / 1000, 'unixepoch'), count(*) FROM runs GROUP BY 1").fetchall())
    conn.close()
    for day, want in oc_expected["per_day"].items():
        assert llm[day] == want["cost_pico_usd"], day
        assert runs[day] == want["runs_started"], day


def test_tool_calls_by_name(corpus_db, oc_expected):
    conn = open_reader(corpus_db)
    rows = conn.execute(
        "SELECT tool_name, count(*), sum(status = 'error'), sum(status IN ('running', 'interrupted')) FROM tool_calls "
        "GROUP BY 1"
    ).fetchall()
    conn.close()
    got = {name: {"calls": c, "failed": f, "orphaned": o} for name, c, f, o in rows}
    assert got == oc_expected["detail"]["tool_calls_by_name"]


def test_sessions_sample(corpus_db, oc_expected):
    by_id = {s["session_id"]: s for s in _sessions(corpus_db)}
    for want in oc_expected["sessions_sample"]:
        for sess in [want, *want["children"]]:
            got = by_id[sess["sessionId"]]
            assert got["session_key"] == sess["sessionKey"]
            assert got["agent_id"] == sess["agentId"]
            assert got["runs"] == sess["runs"], sess["sessionId"]
            assert got["llm_calls"] == sess["llm_calls"]
            assert got["tool_calls"] == sess["tool_calls"]
            assert got["tool_errors"] == sess["failed_tool_calls"]
            assert got["input_tokens"] == sess["tokens"]["input"]
            assert got["output_tokens"] == sess["tokens"]["output"]
            assert got["total_tokens"] == sess["tokens"]["total"]
            assert round(got["cost_usd"] * 10**12) == sess["cost_pico_usd"]
            assert got["first_activity_at"] == sess["first_ts"]
            # The reply message carries no ids at all; until messages are attributed to sessions,
            # a session's activity ends with its last event that names it.
            lag = parse_time(sess["last_ts"]) - parse_time(got["last_activity_at"])
            assert 0 <= lag < 5000, (sess["sessionId"], lag)


def test_sessions_list_the_calls_they_count(corpus_db, monkeypatch):
    forbid_call_scans(monkeypatch)
    conn = open_reader(corpus_db)
    try:
        assert listed_as_counted(conn) == []
    finally:
        conn.close()


def test_big_line_is_indexed(corpus_db, oc_expected):
    big = oc_expected["lines"]["big_line"]
    path = str((CORPUS / "oc-telemetry" / big["path"]).resolve())
    line_no = big["line"]
    offset = sum(len(line) for line in open(path, "rb").readlines()[: line_no - 1])
    assert scalar(corpus_db, "SELECT count(*) FROM events e JOIN files f ON f.id = e.file_id "
                             "WHERE f.path = ? AND e.offset = ?", (path, offset)) == 1


def test_rejects_name_file_and_offset(corpus_db, oc_expected):
    conn = open_reader(corpus_db)
    rows = queries.rejects(conn, queries.Window())
    conn.close()
    per_file: dict[str, int] = {}
    for r in rows:
        rel = str(Path(r["path"]).relative_to(Path(r["path"]).parents[3]))
        per_file[rel] = per_file.get(rel, 0) + 1
        with open(r["path"], "rb") as f:
            f.seek(r["offset"])
            line = f.readline()
        assert len(line.rstrip(b"\n")) == r["length"]
        assert r["offset"] == 0 or open(r["path"], "rb").read()[r["offset"] - 1:r["offset"]] == b"\n"
    want = {p: v["malformed"] for p, v in oc_expected["files"]["by_path"].items() if v["malformed"]}
    assert per_file == want
    reasons = sorted(r["reason"].split(":")[0] for r in rows)
    assert reasons == ["blank line", "invalid JSON", "invalid UTF-8", "invalid UTF-8"]


def test_reingest_and_copy_change_nothing(tmp_path, oc_corpus):
    db = tmp_path / "ledger.db"
    first = ingest(db, oc_corpus)
    assert first.events == 2184
    before = dump(db)
    again = ingest(db, oc_corpus)
    assert (again.lines, again.events) == (0, 0)
    copy = tmp_path / "copy"
    shutil.copytree(oc_corpus, copy)
    from_copy = ingest(db, copy)
    assert from_copy.events == 0
    assert dump(db) == before


def test_cli_usage_and_sessions_json(corpus_db, oc_expected):
    env = cli_env(corpus_db)
    out = subprocess.run([sys.executable, "-m", "agentledger", "usage", "--json"], env=env,
                         capture_output=True, check=True)
    u = json.loads(out.stdout)
    assert u["cost_usd"] == pytest.approx(oc_expected["totals"]["cost_usd"], abs=1e-9)
    for key in ("sessions", "runs", "interrupted_runs", "llm_calls", "llm_errors", "tool_calls", "tool_errors",
                "subagents", "compactions", "rejected_lines", "unpriced_calls", "input_tokens", "output_tokens",
                "cache_read_tokens", "cache_write_tokens", "cost_usd"):
        assert key in u
    out = subprocess.run([sys.executable, "-m", "agentledger", "sessions", "--json", "--limit", "1000"], env=env,
                         capture_output=True, check=True)
    rows = json.loads(out.stdout)
    assert len(rows) == oc_expected["totals"]["sessions"] + oc_expected["totals"]["subagent_sessions"]
    for key in ("session_key", "session_id", "agent_id", "source", "status", "started_at", "ended_at", "runs",
                "llm_calls", "tool_calls", "tool_errors", "input_tokens", "output_tokens", "cache_read_tokens",
                "cache_write_tokens", "cost_usd"):
        assert key in rows[0]


def test_a_session_id_shows_that_instance_and_the_subagents_it_spawned(corpus_db, oc_expected):
    # A reset starts a new instance of a session key: asked by its id, a session is that instance, its
    # family the subagents spawned while it was the key's current one (what cost_including_children counts).
    for want in oc_expected["sessions_sample"]:
        sid = want["sessionId"]
        d = cli_json(corpus_db, "session", sid)
        assert [i["session_id"] for i in d["instances"]] == [sid]
        assert round(d["cost_usd"] * 10**12) == want["cost_pico_usd"]
        assert d["family_cost_usd"] == pytest.approx(want["cost_including_children"], abs=1e-9), sid
        children = sorted(c["sessionKey"] for c in want["children"])
        assert sorted(c["child_session_key"] for c in d["subagents"]) == children, sid
        node = cli_json(corpus_db, "tree", sid)
        assert round(node["own_cost_usd"] * 10**12) == want["cost_pico_usd"]
        assert node["cumulative_cost_usd"] == pytest.approx(want["cost_including_children"], abs=1e-9), sid
        assert sorted(c["session_key"] for c in node["children"]) == children
        spawns = cli_json(corpus_db, "timeline", sid, "--kinds", "subagent")
        assert sorted(i["id"] for i in spawns) == children


def test_a_session_key_shows_every_instance_and_their_subagents(corpus_db, oc_expected):
    for key, want in oc_expected["session_key_totals_for_sampled_main_keys"].items():
        d = cli_json(corpus_db, "session", key)
        assert len(d["instances"]) == want["sessions"]
        assert round(d["cost_usd"] * 10**12) == want["cost_pico_usd"]
        # The key's instances share its subagents out, each to the one that spawned it.
        parts = [cli_json(corpus_db, "session", i["session_id"]) for i in d["instances"]]
        assert sorted(c["child_session_key"] for c in d["subagents"]) == sorted(
            c["child_session_key"] for p in parts for c in p["subagents"])
        assert d["family_cost_usd"] == pytest.approx(sum(p["family_cost_usd"] for p in parts), abs=1e-9)
        assert cli_json(corpus_db, "tree", key)["cumulative_cost_usd"] == pytest.approx(d["family_cost_usd"], abs=1e-9)
