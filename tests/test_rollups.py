"""Rollups equal their recomputation from base rows, whatever order the events came in."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import apsw
import orjson
import pytest
from conftest import as_of_version, ingest, metric_counters
from served import Served
from serving import wait_for
from ledgerdump import dump, usage, verify
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


def _agentledger(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args], capture_output=True,
                          text=True, timeout=120)


def _corrupt(db: Path) -> None:
    """Rollup rows that no longer sum their rows: one off by a little, one gone, one made up."""
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE usage_slots SET cost_pico = cost_pico + 1 WHERE slot_ms = (SELECT min(slot_ms) FROM usage_slots)")
    conn.execute("DELETE FROM session_totals WHERE session_id = (SELECT max(session_id) FROM session_totals)")
    conn.execute("INSERT INTO tool_slots (slot_ms, agent_id, tool_name, calls, errors, duration_ms, timed_calls) "
                 "VALUES (0, 'nobody', 'nothing', 3, 1, 0, 0)")
    conn.close()


def _answers(db: Path) -> tuple:
    """What the reports built on the rollups say."""
    conn = open_reader(db)
    try:
        window = queries.Window()
        return (queries.usage(conn, window), queries.sessions(conn, window), queries.costs(conn, window, "model"),
                queries.tools(conn, window))
    finally:
        conn.close()


def _position(db: Path) -> int:
    conn = open_reader(db)
    try:
        return queries.ledger_position(conn)
    finally:
        conn.close()


def test_verify_repair_rebuilds_the_rollups_from_the_rows(tmp_path, oc_corpus):
    # A failed verify left no way to repair but a fresh ledger from the logs, which are often gone
    # (Claude Code deletes its transcripts after 30 days).
    db, clean = tmp_path / "l.db", tmp_path / "clean.db"
    ingest(db, oc_corpus)
    ingest(clean, oc_corpus)
    _corrupt(db)
    bad = _agentledger(db, "verify")
    assert bad.returncode == 1
    found = re.search(r"^FAILED: (\d+) rollup differences \(([^)]*)\), 0 checkpoint problems; "
                      r"`agentledger verify --repair` rebuilds the rollups from the rows$", bad.stderr.strip())
    assert found and found.group(2) == "session_totals, tool_slots, usage_slots", bad.stderr
    assert _answers(db) != _answers(clean)
    before = _position(db)

    out = _agentledger(db, "verify", "--repair")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == (f"repaired: {found.group(1)} rollup differences ({found.group(2)}); every rollup "
                        "rebuilt from the base rows"), out.stdout
    assert lines[1].startswith("ok: ") and out.stderr == ""
    assert _agentledger(db, "verify").returncode == 0
    assert verify(db) == []
    assert _answers(db) == _answers(clean)
    # The ledger moved: hot session views kept from before are rebuilt at serve's next start.
    assert _position(db) == before + 1

    again = _agentledger(db, "verify", "--repair", "--json")
    assert again.returncode == 0, again.stderr
    answer = orjson.loads(again.stdout)
    assert answer["ok"] and answer["repaired"] == {"differences": 0, "tables": []}
    assert _position(db) == before + 1  # nothing to repair: nothing written


def test_verify_repair_is_refused_while_serve_writes_the_ledger(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(llm_call(n, session=f"s{n % 3}") for n in range(1, 31)))
    daemon = Served.on(tmp_path, logs.root)
    db = daemon.db
    ingest(db, logs.root)
    _corrupt(db)
    daemon.start()
    try:
        wait_for(lambda: "caught up" in daemon.log(), what="serve caught up")
        out = _agentledger(db, "verify", "--repair")
        assert out.returncode == 1, out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith("agentledger: another agentledger process is writing") and "stop `serve`" in line
        assert out.stdout == ""
        assert _agentledger(db, "verify").returncode == 1  # untouched
    finally:
        assert daemon.stop() == 0
    assert _agentledger(db, "verify", "--repair").returncode == 0
    assert _agentledger(db, "verify").returncode == 0


def _hot_view_at_start(daemon: Served) -> dict:
    """Session s1's hot view once ``serve`` started on the ledger caught up; it is stopped again."""
    daemon.start()
    try:
        wait_for(lambda: "caught up" in daemon.log(), what="serve caught up")
        return daemon.get("/v1/sessions/agent:main:s1/hot")[1]
    finally:
        assert daemon.stop() == 0


def test_hot_views_serve_kept_from_before_a_repair_are_rebuilt_at_its_next_start(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1) + llm_call(2))
    # The views are written at the latest on the way out: the flush interval is far off.
    daemon = Served.on(tmp_path, logs.root, flush_interval_s=3600)
    db = daemon.db
    ingest(db, logs.root)
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE session_totals SET llm_calls = llm_calls + 5")
    conn.close()

    assert _hot_view_at_start(daemon)["llm_calls"] == 7  # built from the corrupted totals, kept in the state dir
    assert _agentledger(db, "verify", "--repair").returncode == 0
    assert _hot_view_at_start(daemon)["llm_calls"] == 2


def test_hot_views_serve_kept_from_before_a_migration_that_refills_rollups_are_rebuilt(tmp_path):
    logs = LogDir(tmp_path / "state")
    snapshot = {"provider": "anthropic", "model": "claude-sonnet-4-5", "costUsd": 2.0,
                "usage": {"input": 1, "output": 1, "total": 2}}
    logs.append(llm_call(1) + event(2, "run.start", {}, run="r2") + event(3, "usage.snapshot", snapshot, run="r2")
                + event(4, "run.end", {}, run="r2"))
    daemon = Served.on(tmp_path, logs.root, flush_interval_s=3600)
    db = daemon.db
    ingest(db, logs.root)
    conn = apsw.Connection(str(db))
    conn.execute("DELETE FROM session_fallback_costs")  # as a ledger of before 0031 may hold them: wrong
    conn.close()

    assert _hot_view_at_start(daemon)["cost_usd"] == pytest.approx(0.000001)  # kept in the state dir
    conn = apsw.Connection(str(db))
    as_of_version(conn, 30)  # the next start migrates, refilling session_fallback_costs (db.REFILLS)
    conn.close()
    assert _hot_view_at_start(daemon)["cost_usd"] == pytest.approx(2.000001)


def _checkpoint_off_a_line(tmp_path: Path, oc_corpus: Path) -> Path:
    """A ledger of some corpus lines whose file checkpoint no longer sits at a line's end."""
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(_lines(oc_corpus)[:50]))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE files SET offset = offset - 3")
    conn.close()
    return db


def test_verify_passes_over_a_followed_file_replaced_by_a_fifo(tmp_path):
    # It opened each followed file by its path to check its checkpoint: a FIFO there waited for a writer.
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    logs.live.unlink()
    os.mkfifo(logs.live)
    out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "verify"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr


def test_verify_repair_leaves_checkpoints_alone_and_says_so(tmp_path, oc_corpus):
    db = _checkpoint_off_a_line(tmp_path, oc_corpus)
    out = _agentledger(db, "verify", "--repair")
    assert out.returncode == 1
    assert out.stdout.startswith("nothing to repair: every rollup equals its recomputation\n")
    assert "line boundary" in out.stdout
    (failed,) = out.stderr.strip().splitlines()
    assert failed.startswith("FAILED: 0 rollup differences (none), 1 checkpoint problems")
    assert "--repair rebuilds rollups only" in failed and "again from its start" in failed


def test_verify_repair_of_no_ledger_is_one_line_and_makes_nothing(tmp_path):
    db = tmp_path / "none" / "l.db"
    out = _agentledger(db, "verify", "--repair")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line == f"agentledger: no ledger at {db}: nothing to repair (pass --db)"
    assert not db.parent.exists()


def test_verify_repair_of_a_ledger_it_cannot_write_is_one_line(tmp_path, unprivileged):
    # A member of the service's group may read its ledger, not write it: no other --db would help.
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    _corrupt(db)
    db.chmod(0o444)
    out = subprocess.run([*unprivileged, sys.executable, "-m", "agentledger", "--db", str(db), "verify", "--repair"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line == (f"agentledger: cannot repair {db}: Permission denied; `verify --repair` writes the ledger: run it "
                    "as the ledger's owner (the service's: sudo -u agentledger), with `serve` stopped")
    assert not Path(f"{db}.lock").exists()


def test_verify_finds_a_checkpoint_off_a_line_boundary(tmp_path, oc_corpus):
    db = _checkpoint_off_a_line(tmp_path, oc_corpus)
    bad = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "verify"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "line boundary" in bad.stdout


def _changed_after_ingest(tmp_path: Path, change) -> tuple[Path, LogDir]:
    """A ledger of ten calls, then ``change`` made to their file while nothing reads it."""
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(llm_call(n) for n in range(1, 11)))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    change(logs)
    return db, logs


def _copytruncated(logs: LogDir, last: int) -> None:
    logs.copytruncate()
    logs.append(b"".join(llm_call(n) for n in range(11, last + 1)))


# The file changed since its checkpoint as the tailer follows it: copied then truncated (logrotate's
# copytruncate) and written again, shorter or longer than where it was read to; or truncated in place and
# written again from the same first line. Not the ledger's fault: the next catch-up reads what is there.
CHANGES = {
    "copytruncate": (lambda logs: _copytruncated(logs, 11), "another first line", 11),
    "copytruncate, grown past the checkpoint": (lambda logs: _copytruncated(logs, 40), "another first line", 40),
    "truncated, same first line": (lambda logs: (logs.truncate(), logs.append(llm_call(1))), "truncated", 10),
}


@pytest.mark.parametrize("change", CHANGES)
def test_verify_tells_a_file_changed_since_its_checkpoint_and_exits_0(tmp_path, change):
    # A file rotated by copytruncate between two ingests made verify fail (exit 1) on a sound ledger, and with
    # it the deploy's `verify --repair` and every cron'd verify, though the next ingest read it right.
    make, told, calls = CHANGES[change]
    db, logs = _changed_after_ingest(tmp_path, make)
    for args in (("verify",), ("verify", "--repair")):
        out = _agentledger(db, *args)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stderr == ""
        (note,) = [line for line in out.stdout.splitlines() if line.startswith(str(logs.live))]
        assert told in note and "next catch-up" in note, note
        assert out.stdout.splitlines()[-1].startswith("ok: ")
    listed = orjson.loads(_agentledger(db, "verify", "--json").stdout)
    assert listed["ok"] is True and listed["checkpoints"] == [] and len(listed["changed_files"]) == 1
    # Nothing repaired, nothing lost or counted twice: the next ingest reads every call once.
    ingest(db, logs.root)
    assert usage(db)["llm_calls"] == calls
    again = _agentledger(db, "verify")
    assert again.returncode == 0 and again.stdout.startswith("ok: ") and str(logs.live) not in again.stdout


def test_verify_tells_a_file_rewritten_past_its_checkpoint_from_the_same_first_line(tmp_path):
    # Truncated and written again from the same first line, to past where it was read: the line read last is
    # no longer before the checkpoint, so the tailer reads it again from its start, and verify says so.
    def rewrite(logs: LogDir) -> None:
        logs.truncate()
        logs.append(b"".join(llm_call(n) for n in range(1, 10)) + llm_call(10, cost_pico=2_000_000)
                    + llm_call(11))

    db, logs = _changed_after_ingest(tmp_path, rewrite)
    out = _agentledger(db, "verify")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{logs.live}: rewritten since its checkpoint" in out.stdout


def test_a_ledger_from_before_rollups_gets_them_filled(tmp_path, oc_corpus, oc_expected):
    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    # Turn it back into a version-1 ledger: base rows only.
    conn = apsw.Connection(str(db))
    as_of_version(conn, 1)
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


def _killed_run(n: int, kind: str, data: dict, session_id: str = "S5") -> bytes:
    """A line of run r5 of session S5 (agent:main:main); tool lines name no session (FORMATS §1)."""
    return event(n, kind, data, session="main", run="r5", session_id=session_id)


_SESSION_START = _killed_run(1, "session.start", {"sessionId": "S5"})
_CALL = _killed_run(2, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                    "delta": {"input": 1, "output": 2, "total": 3}, "costUsd": 0.01})
_TOOL_LINES = [_killed_run(3, "tool.start", {"toolName": "exec", "toolCallId": "call-1"}, "unknown"),
               _killed_run(4, "tool.end", {"toolName": "exec", "toolCallId": "call-1", "isError": True}, "unknown")]
_RUN_END = _killed_run(5, "run.end", {"provider": "anthropic", "model": "claude-sonnet-4-5", "durationMs": 4,
                                      "usage": {"input": 1, "output": 2, "total": 3}, "toolCallCount": 1,
                                      "stopReason": "stop"})


def _session_view(db: Path) -> tuple:
    """What ``sessions`` and ``session agent:main:main`` show of S5's tool calls, and its activity span."""
    conn = open_reader(db)
    try:
        (s5,) = queries.sessions(conn, queries.Window())
        detail = queries.session_detail(conn, "agent:main:main")
    finally:
        conn.close()
    return (s5["session_id"], s5["tool_calls"], s5["tool_errors"],
            [(t["tool_call_id"], t["status"]) for t in detail["tool_calls"]],
            s5["first_activity_at"], s5["last_activity_at"])


@pytest.mark.parametrize("order", ["as written", "tools before the call", "tools first of all"])
def test_a_tool_call_of_a_run_known_only_by_its_model_calls_counts_in_their_session(tmp_path, order):
    """A log that begins mid-run, the run then killed: no run.start or run.end says whose run r5 is, but its
    llm.call does, and the tool lines (which name no session) reach S5 through their run."""
    lines = {"as written": [_SESSION_START, _CALL, *_TOOL_LINES],
             "tools before the call": [_SESSION_START, *_TOOL_LINES, _CALL],
             "tools first of all": [*_TOOL_LINES, _SESSION_START, _CALL]}[order]
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(lines))
    db = tmp_path / "l.db"
    ingest(db, logs.root, batch_lines=1)  # a batch per line: each line finds only what came before it
    assert verify(db) == []
    sid, tool_calls, tool_errors, listed, _, last = _session_view(db)
    assert (sid, tool_calls, tool_errors, listed) == ("S5", 1, 1, [("call-1", "error")])
    assert last.endswith(":20.004Z")  # the session's activity reaches its run's last tool line
    u = usage(db)
    assert (u["runs"], u["tool_calls"], u["tool_errors"]) == (0, 1, 1)


@pytest.mark.parametrize("reads", [
    ([_SESSION_START, _CALL, *_TOOL_LINES], [_RUN_END]),
    ([*_TOOL_LINES, _SESSION_START, _CALL], [_RUN_END]),
    ([*_TOOL_LINES], [_SESSION_START, _CALL]),
    ([_SESSION_START, *_TOOL_LINES], [_CALL, _RUN_END]),
], ids=["run end later", "tools first, run end later", "call later", "call and run end later"])
def test_a_run_told_over_two_reads_leaves_the_ledger_as_one_read_of_it_all(tmp_path, reads):
    """What says whose run r5 is (its llm.call, its run.end) arrives in a later read than its tool lines, or
    earlier: the session counts the tool call once, as one read of the whole log does."""
    steps = tmp_path / "steps"
    logs = LogDir(steps / "state")
    for lines in reads:
        logs.append(b"".join(lines))
        ingest(steps / "l.db", logs.root)
        assert verify(steps / "l.db") == []
    whole = tmp_path / "whole"
    once = LogDir(whole / "state")
    once.append(b"".join(line for lines in reads for line in lines))
    ingest(whole / "l.db", once.root)
    for db in (steps / "l.db", whole / "l.db"):
        assert verify(db) == []
        assert _session_view(db)[:4] == ("S5", 1, 1, [("call-1", "error")])
        assert usage(db)["runs"] == (_RUN_END in reads[1])
    assert _session_view(steps / "l.db") == _session_view(whole / "l.db")
    tables = ("sessions", "runs", "llm_calls", "tool_calls", "session_ids")
    assert dump(steps / "l.db", tables) == dump(whole / "l.db", tables)
    assert _session_totals(steps / "l.db") == _session_totals(whole / "l.db")


def test_a_run_whose_start_names_another_session_than_its_first_call_lists_its_tools_once(tmp_path):
    """A run going on across a reset: its model call names S2, its start S1, which the runs row keeps and
    where its tool calls count; they are listed there alone, wherever its lines were read."""
    base = 1_790_000_000_000
    call = {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
            "delta": {"input": 1, "output": 2, "total": 3}, "costUsd": 0.01}

    def ev(n: int, kind: str, data: dict, sid: str, ts: int) -> bytes:
        return event(n, kind, data, session="main", run="r4", session_id=sid, ts=base + ts)

    logs = LogDir(tmp_path / "state")
    db = tmp_path / "ledger.db"
    logs.append(ev(1, "llm.call", call, "S2", 49) + ev(2, "tool.start", {"toolName": "exec", "toolCallId": "c4"},
                                                        "unknown", 51)
                + ev(3, "tool.end", {"toolName": "exec", "toolCallId": "c4"}, "unknown", 52))
    ingest(db, logs.root)
    logs.append(ev(4, "run.start", {}, "S1", 50))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        assert conn.execute("SELECT session_id, tool_calls FROM session_totals ORDER BY 1").fetchall() == \
            [("S1", 1), ("S2", 0)]
        listed = {sid: len(queries.activity(conn, base, base + 100, session_ids=[sid])["tools"])
                  for sid in ("S1", "S2")}
        assert listed == {"S1": 1, "S2": 0}
    finally:
        conn.close()


def _session_totals(db: Path) -> list[tuple]:
    conn = open_reader(db)
    try:
        return conn.execute("SELECT * FROM session_totals ORDER BY session_id").fetchall()
    finally:
        conn.close()


def test_a_ledger_from_before_run_sessions_counts_such_tool_calls_once_migrated(tmp_path):
    """A ledger written before run_activity said whose a run is: the migration learns it from the runs and
    model calls it holds, and the session's totals, tool list and span follow."""
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join([_SESSION_START, _CALL, *_TOOL_LINES]))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    # As the ledger was before: the tool call reached no session, nor did its time.
    conn = apsw.Connection(str(db))
    as_of_version(conn, 22)  # run_activity without its session (0023), and without what later migrations added
    conn.execute("UPDATE session_totals SET tool_calls = 0, tool_errors = 0")
    conn.execute("UPDATE sessions SET last_ms = (SELECT ts_ms FROM llm_calls)")
    conn.close()
    open_writer(db).close()
    assert verify(db) == []
    sid, tool_calls, tool_errors, listed, _, last = _session_view(db)
    assert (sid, tool_calls, tool_errors, listed) == ("S5", 1, 1, [("call-1", "error")])
    assert last.endswith(":20.004Z")


def test_metrics_start_again_from_the_sums_a_repair_rebuilt(tmp_path, oc_corpus):
    # serve never shows a counter below the highest value it showed (metric-floors.json): after a repair
    # lowered wrong sums, the floors kept of them hid the repair until the ledger passed them again.
    from agentledger.metrics import CounterFloors

    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    right = metric_counters(db)
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE usage_days SET llm_calls = llm_calls * 2")
    conn.close()
    path = tmp_path / "metric-floors.json"
    assert metric_counters(db, floors=CounterFloors(path)) != right
    assert _agentledger(db, "verify", "--repair").returncode == 0
    assert metric_counters(db, floors=CounterFloors(path)) == right
