"""Runs, tool calls and subagents that never end become interrupted; a late end still wins."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import apsw
import orjson
from conftest import as_of_version, ingest, metric_counters
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledgerdump import dump, rows, scalar
from logwriter import LogDir
from served import Served
from serving import wait_for
from test_transcript_sources import SESSION, cc_assistant, cc_prompt, cc_result

from agentledger.facts import RunEnded, RunStarted
from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.reconcile import _OPEN_RUNS, _OPEN_TOOLS, reconcile
from agentledger.ledger.verify import check_rollups
from agentledger.ledger.writer import Batch, LedgerWriter


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


def test_metrics_counters_never_go_back_as_calls_and_runs_settle(tmp_path, db):
    """Prometheus reads any decrease of a counter as a restart: a running call counted as ok, then
    ended in error, or a run counted interrupted, then ended late, made it see one."""
    logs = LogDir(tmp_path / "state")
    t0 = 1_790_000_000_000
    logs.append(_ev(1, t0, "run.start", {"model": "m", "provider": "p"})
                + _ev(2, t0 + 5, "tool.start", {"toolName": "exec", "toolCallId": "T"}))
    ingest(db, logs.root)
    seen = [metric_counters(db)]
    conn = open_writer(db)
    reconcile(LedgerWriter(conn), now_ms=t0 + 3_600_000, grace_s=600)
    conn.close()
    seen.append(metric_counters(db))
    logs.append(_ev(3, t0 + 9_000_000, "tool.end", {"toolName": "exec", "toolCallId": "T", "isError": True})
                + _ev(4, t0 + 9_000_001, "run.end", {"model": "m", "provider": "p"}))
    ingest(db, logs.root)
    seen.append(metric_counters(db))
    for before, after in zip(seen, seen[1:]):
        assert all(after.get(key, 0) >= value for key, value in before.items()), (before, after)
    tools = ("agentledger_tool_calls_total", (("outcome", "error"), ("tool", "exec")))
    runs = ("agentledger_runs_total", (("outcome", "ok"),))
    assert [(s.get(tools, 0), s.get(runs, 0)) for s in seen] == [(0, 0), (0, 0), (1, 1)]


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


def test_a_run_waiting_on_a_subagent_that_still_works_is_no_orphan(tmp_path, db):
    """The parent's log is silent while its child works: the run, and the spawn's tool call, wait with
    the child, and are orphaned only once the child is silent too."""
    t0, kid = 1_790_000_000_000, "agent:main:subagent:kid"
    lines = [_ev(1, t0, "run.start", {"model": "m", "provider": "p"}),
             _ev(2, t0 + 10, "tool.start", {"toolName": "sessions_spawn", "toolCallId": "T1"}),
             _ev(3, t0 + 20, "subagent.spawn", {"childSessionKey": kid, "agentId": "main", "label": "k", "mode": "run"})]
    lines += [_ev(4 + i, t0 + i * 60_000, "llm.call", {"provider": "p", "model": "m", "costUsd": 0.01,
                                                       "delta": {"input": 1, "output": 1, "total": 2}},
                  sessionKey=kid, sessionId="K", runId="RK") for i in range(1, 20)]
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(lines))
    ingest(db, logs.root)
    child_last = t0 + 19 * 60_000
    conn = open_writer(db)
    try:
        done = reconcile(LedgerWriter(conn), child_last + 599_000, grace_s=600)
        assert (done.runs, done.tool_calls, done.subagents) == (0, 0, 0)
        assert scalar(db, "SELECT status FROM runs WHERE run_id = 'R'") == "running"
        assert scalar(db, "SELECT status FROM tool_calls WHERE tool_call_id = 'T1'") == "running"
        done = reconcile(LedgerWriter(conn), child_last + 601_000, grace_s=600)
        assert (done.subagents, done.tool_calls) == (1, 1)
        assert scalar(db, "SELECT status FROM runs WHERE run_id = 'R'") == "interrupted"
    finally:
        conn.close()
    _verify(db)


def test_open_runs_find_their_working_children_without_reading_every_open_subagent(tmp_path, db):
    """Every open run and open tool call asks whether a child of its run still works: each finds its own
    children, else a reconcile with many runs left open (a gateway that crashed, each run waiting on a
    subagent) reads every running subagent for each of them. A ledger from before that index gets it."""
    t0 = 1_790_000_000_000
    lines = []
    for n, (run, life) in enumerate([("R1", 19), ("R2", 1), ("R3", None)]):
        base = 100 * n
        lines += [_ev(base + 1, t0, "run.start", {"model": "m", "provider": "p"}, runId=run, sessionId=run),
                  _ev(base + 2, t0 + 10, "tool.start", {"toolName": "sessions_spawn", "toolCallId": f"T{run}"},
                      runId=run, sessionId=run)]
        if life is not None:
            kid = f"agent:main:subagent:{run}"
            lines += [_ev(base + 3, t0 + 20, "subagent.spawn",
                          {"childSessionKey": kid, "agentId": "main", "label": "k", "mode": "run"},
                          runId=run, sessionId=run),
                      _ev(base + 4, t0 + life * 60_000, "llm.call",
                          {"provider": "p", "model": "m", "delta": {"input": 1, "output": 1, "total": 2}},
                          sessionKey=kid, sessionId=f"K{run}", runId=f"RK{run}")]
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(lines))
    ingest(db, logs.root)
    conn = apsw.Connection(str(db))
    as_of_version(conn, 43)
    conn.close()
    conn = open_writer(db)  # migrates
    try:
        done = reconcile(LedgerWriter(conn), t0 + 19 * 60_000 + 599_000, grace_s=600)
        plans = {name: [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
                 for name, sql, params in (("runs", _OPEN_RUNS, (0,)), ("tools", _OPEN_TOOLS, (0, "[]")))}
    finally:
        conn.close()
    assert (done.runs, done.tool_calls) == (2, 2)
    assert rows(db, "SELECT run_id, status FROM runs WHERE run_id LIKE 'R_' ORDER BY run_id") == [
        ("R1", "running"), ("R2", "interrupted"), ("R3", "interrupted")]
    assert rows(db, "SELECT tool_call_id, status FROM tool_calls ORDER BY tool_call_id") == [
        ("TR1", "running"), ("TR2", "interrupted"), ("TR3", "interrupted")]
    for name, plan in plans.items():
        scans = [step for step in plan if step.startswith("SCAN") and not step.startswith("SCAN json_each")]
        assert scans in (["SCAN r USING INDEX runs_open"], ["SCAN t USING INDEX tool_calls_open"]), (name, plan)
    _verify(db)


def test_telemetry_runs_without_an_end_are_interrupted_even_with_nothing_left_waiting(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    t0 = 1_790_000_000_000
    logs.append(_ev(1, t0, "run.start", {"model": "m", "provider": "p"})
                + _ev(2, t0 + 5, "llm.call", {"provider": "p", "model": "m", "delta": {"input": 1, "total": 1}},
                      agentId="unknown"))
    ingest(db, logs.root)
    conn = open_writer(db)
    done = reconcile(LedgerWriter(conn), now_ms=t0 + 3_600_000, grace_s=600)
    conn.close()
    # Only Claude Code turns end silently; a telemetry run owes its run.end.
    assert (done.runs, done.finished_runs) == (1, 0)
    assert scalar(db, "SELECT status FROM runs") == "interrupted"


# -- Claude Code: turns mostly end without saying so ------------------------------------------------

def _cc_interrupt(uuid: str, second: int) -> bytes:
    return orjson.dumps({"type": "user", "uuid": uuid, "sessionId": SESSION, "isSidechain": False,
                         "timestamp": f"2026-10-01T10:00:{second:02d}.000Z",
                         "message": {"role": "user", "content": [
                             {"type": "text", "text": "[Request interrupted by user for tool use]"}]}}) + b"\n"


def _tool_use(tool_id: str) -> dict:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}


def _text(words: str) -> dict:
    return {"type": "text", "text": words}


_CC_T0 = 1_790_848_800_000  # 2026-10-01T10:00:00Z, the minute the lines below are written in


def _runs(db: Path) -> list[tuple]:
    conn = open_reader(db)
    try:
        return conn.execute("SELECT run_id, status, stop_reason, ended_ms - ?, end_rank FROM runs ORDER BY started_ms",
                            (_CC_T0,)).fetchall()
    finally:
        conn.close()


def _settle(db: Path):
    conn = open_writer(db)
    try:
        return reconcile(LedgerWriter(conn), now_ms=_CC_T0 + 3_600_000, grace_s=600)
    finally:
        conn.close()


def test_claude_code_turns_end_by_the_next_prompt_a_user_interrupt_or_a_last_answer(tmp_path, db):
    project = tmp_path / "claude" / "projects" / "-home-dev-app"
    project.mkdir(parents=True)
    transcript = project / f"{SESSION}.jsonl"
    transcript.write_bytes(b"".join([
        cc_prompt("u1", "what is in the repo?", 0),
        cc_assistant("a1", "msg_1", _text("A parser."), output=5, second=1),  # no stop reason written
        cc_prompt("u2", "run the tests", 10),
        cc_assistant("a2", "msg_2", _tool_use("toolu_1"), output=5, second=11, stop="tool_use"),
        cc_result("r1", "toolu_1", 12),
        cc_assistant("a3", "msg_3", _text("All green."), output=5, second=13, stop="end_turn"),
        cc_prompt("u3", "now deploy", 20),
        cc_assistant("a4", "msg_4", _tool_use("toolu_2"), output=5, second=21, stop="tool_use"),
        cc_result("r2", "toolu_2", 22),
        _cc_interrupt("i1", 23),
        cc_prompt("u4", "never mind, summarize", 30),
        cc_assistant("a5", "msg_5", _text("Done."), output=5, second=31),  # the last answer; then quiet
    ]))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _runs(db) == [
        ("u1", "ok", "next_prompt", 10_000, 1),  # ended when the next prompt came
        ("u2", "ok", "end_turn", 13_000, 2),  # the model said so; the next prompt does not override it
        ("u3", "interrupted", "user_interrupt", 23_000, 3),
        ("u4", "running", None, None, 0),
    ]
    done = _settle(db)
    assert (done.runs, done.finished_runs) == (0, 1)
    assert _runs(db)[-1] == ("u4", "ok", None, 31_000, 0)  # finished at its last answer, not orphaned
    usage = json.loads(_cli(db, "usage", "--json").stdout)
    assert (usage["runs"], usage["interrupted_runs"], usage["open_runs"]) == (4, 1, 0)
    _verify(db)
    # Read again from a copy: nothing is ended twice, nor anything ended by a prompt that came before it.
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "claude", copy)
    before = dump(db)
    assert ingest(db, copy, fmt="claude-code").events == 0
    assert dump(db) == before


def test_a_claude_code_turn_left_waiting_on_a_tool_is_orphaned_until_its_session_goes_on(tmp_path, db):
    project = tmp_path / "claude" / "projects" / "-home-dev-app"
    project.mkdir(parents=True)
    transcript = project / f"{SESSION}.jsonl"
    transcript.write_bytes(cc_prompt("u1", "clean the build box", 0)
                           + cc_assistant("a1", "msg_1", _tool_use("toolu_1"), output=5, second=1, stop="tool_use"))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    done = _settle(db)
    assert (done.runs, done.finished_runs, done.tool_calls) == (1, 0, 1)
    assert _runs(db) == [("u1", "interrupted", None, None, 0)]
    _verify(db)
    # The session was only paused: the result and a new prompt arrive later (read by a new process).
    with transcript.open("ab") as f:
        f.write(cc_result("r1", "toolu_1", 40) + cc_prompt("u2", "thanks", 50))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _runs(db) == [("u1", "ok", "next_prompt", 50_000, 1), ("u2", "running", None, None, 0)]
    assert scalar(db, "SELECT status FROM tool_calls") == "ok"
    assert scalar(db, "SELECT sum(runs_interrupted) FROM usage_slots") == 0
    _verify(db)


def test_a_claude_code_read_resumed_mid_file_ends_turns_as_a_straight_read(tmp_path):
    lines = [cc_prompt("u1", "a", 0), cc_assistant("a1", "msg_1", _text("b"), output=5, second=1),
             cc_prompt("u2", "c", 10), cc_assistant("a2", "msg_2", _text("d"), output=5, second=11),
             _cc_interrupt("i1", 12), cc_prompt("u3", "e", 20)]
    ledgers = [_runs(_read_in_two(tmp_path, lines, cut)) for cut in (len(lines), 1, 2, 3, 5)]
    assert ledgers[0] == [("u1", "ok", "next_prompt", 10_000, 1), ("u2", "interrupted", "user_interrupt", 12_000, 3),
                          ("u3", "running", None, None, 0)]
    assert all(runs == ledgers[0] for runs in ledgers)


_ENDS = {
    "next_prompt": RunEnded(event_id=1, ts_ms=50, kind="run.end", source="claude-code", session_id="s", run_id="r",
                            ended_by="next_prompt", stop_reason="next_prompt"),
    "report": RunEnded(event_id=2, ts_ms=30, kind="run.end", source="claude-code", session_id="s", run_id="r",
                       stop_reason="end_turn", duration_ms=20),
    "user": RunEnded(event_id=3, ts_ms=40, kind="run.end", source="claude-code", session_id="s", run_id="r",
                     ended_by="user", stop_reason="user_interrupt"),
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(list(_ENDS)), count=st.integers(1, 3), reconciled=st.integers(0, 3))
def test_the_surest_end_of_a_run_wins_whatever_order_the_ends_arrive_in(tmp_path_factory, order, count, reconciled):
    """Whichever ends of a run arrive, in any order, with reconcile passing at any point in between:
    the row holds the surest of them."""
    db = tmp_path_factory.mktemp("ends") / "l.db"
    conn = open_writer(db)
    try:
        writer = LedgerWriter(conn)
        fid = writer.add_file("claude-code", "/r", "/r/s.jsonl", b"fp", 1, 2, 0, "live").id
        start = RunStarted(event_id=0, ts_ms=10, kind="run.start", source="claude-code", session_id="s", run_id="r")
        arriving = [start, *(_ENDS[name] for name in order[:count])]
        for i, fact in enumerate(arriving):
            if i == reconciled:
                reconcile(writer, now_ms=10**7, grace_s=1)
            writer.apply(Batch(fid, "/r/s.jsonl", i, i + 1, 1, i + 1, [(i, 1, fact)]))
        assert check_rollups(conn) == []
        row = conn.execute("SELECT status, stop_reason, ended_ms FROM runs").fetchall()
    finally:
        conn.close()
    surest = max(order[:count], key=list(_ENDS).index)
    want = {"next_prompt": ("ok", "next_prompt", 50), "report": ("ok", "end_turn", 30),
            "user": ("interrupted", "user_interrupt", 40)}[surest]
    assert row == [want]


def test_a_ledger_from_before_end_ranks_keeps_its_reported_ends(tmp_path, db):
    project = tmp_path / "claude" / "projects" / "-home-dev-app"
    project.mkdir(parents=True)
    transcript = project / f"{SESSION}.jsonl"
    transcript.write_bytes(cc_prompt("u1", "a", 0) + cc_assistant("a1", "msg_1", _text("b"), output=5, second=1,
                                                                  stop="end_turn"))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    conn = apsw.Connection(str(db))
    as_of_version(conn, 11)  # before runs had end ranks, and all that later migrations added
    conn.execute("CREATE INDEX runs_by_session ON runs (session_id)")  # which 0016 replaced
    conn.close()
    with transcript.open("ab") as f:
        f.write(cc_prompt("u2", "c", 10))
    ingest(db, tmp_path / "claude", fmt="claude-code")  # migrates, then reads the next prompt
    assert _runs(db) == [("u1", "ok", "end_turn", 1_000, 2), ("u2", "running", None, None, 0)]
    _verify(db)


def _tool_statuses(db: Path) -> list[tuple]:
    return rows(db, "SELECT tool_call_id, status FROM tool_calls ORDER BY tool_call_id")


def _read_in_two(tmp_path: Path, lines: list[bytes], cut: int, between: Callable[[Path], object] = lambda db: None
                 ) -> Path:
    """A ledger of a Claude Code transcript read in two ingests, the first of its first ``cut`` lines,
    ``between`` them done to it."""
    root = tmp_path / f"cut{cut}" / "claude"
    transcript = root / "projects" / "-home-dev-app" / f"{SESSION}.jsonl"
    transcript.parent.mkdir(parents=True)
    db = tmp_path / f"cut{cut}.db"
    transcript.write_bytes(b"".join(lines[:cut]))
    ingest(db, root, fmt="claude-code")
    between(db)
    with transcript.open("ab") as f:
        f.write(b"".join(lines[cut:]))
    ingest(db, root, fmt="claude-code")
    return db


def _read_settled_in_two(tmp_path: Path, lines: list[bytes], cut: int) -> tuple:
    """Read the first ``cut`` lines, with reconcile passing past the grace, then the rest and reconcile
    again: the turns, the tool calls and the interrupted runs ``usage`` counts."""
    db = _read_in_two(tmp_path, lines, cut, _settle)
    _settle(db)
    _verify(db)
    settled = dump(db)
    assert (_settle(db).runs, _settle(db).finished_runs) == (0, 0) and dump(db) == settled  # idempotent
    usage = json.loads(_cli(db, "usage", "--json").stdout)
    return _runs(db), _tool_statuses(db), usage["interrupted_runs"]


def test_a_claude_code_turn_reconcile_settled_is_settled_again_on_its_later_lines(tmp_path):
    """A turn whose tool outlived the grace when reconcile passed (or that had no answer yet) was cut
    off; its tool's result and the answer read later end it as a read of all its lines does, whichever
    line the first read stopped at."""
    answered = [cc_prompt("u1", "run the tests", 0),
                cc_assistant("a1", "msg_1", _tool_use("toolu_1"), output=5, second=1, stop="tool_use"),
                cc_result("r1", "toolu_1", 12),
                cc_assistant("a2", "msg_2", _text("All tests pass."), output=5, second=13)]  # no stop reason
    for cut in range(len(answered) + 1):
        assert _read_settled_in_two(tmp_path / "answered", answered, cut) == (
            [("u1", "ok", None, 13_000, 0)], [("toolu_1", "ok")], 0), cut
    # Of two tools asked at once, one never answers: the turn stays cut off in every order, its answered
    # tool ended, the other still interrupted.
    one_unanswered = [cc_prompt("u1", "build and lint", 0),
                      cc_assistant("a1", "msg_1", _tool_use("toolu_1"), output=5, second=1, stop="tool_use"),
                      cc_assistant("a2", "msg_2", _tool_use("toolu_2"), output=5, second=2, stop="tool_use"),
                      cc_result("r2", "toolu_2", 12),
                      cc_assistant("a3", "msg_3", _text("Lint is clean."), output=5, second=13)]
    for cut in range(len(one_unanswered) + 1):
        assert _read_settled_in_two(tmp_path / "unanswered", one_unanswered, cut) == (
            [("u1", "interrupted", None, None, 0)], [("toolu_1", "interrupted"), ("toolu_2", "ok")], 1), cut


# -- OpenClaw telemetry: a run, tool call or subagent cut off that goes on --------------------------

def _told(db: Path) -> dict:
    """What `runs`, `run` of each, `subagents` and `usage` tell; `verify` holds."""
    told = {cmd: json.loads(_cli(db, cmd, "--json").stdout) for cmd in ("runs", "subagents", "usage")}
    told["run"] = [json.loads(_cli(db, "run", r["run_id"], "--json").stdout) for r in told["runs"]]
    assert _cli(db, "verify").returncode == 0
    return told


def _telemetry_in_two_and_at_once(tmp_path: Path, lines: list[bytes], cut: int) -> tuple[dict, dict]:
    """A telemetry log `ingest`ed (reconcile at the default grace last) in two reads, the first of its first
    ``cut`` lines, and the same lines read at once."""
    at_once = LogDir(tmp_path / f"at-once{cut}")
    at_once.append(b"".join(lines))
    assert _cli(tmp_path / f"at-once{cut}.db", "ingest", str(at_once.root)).returncode == 0
    db = tmp_path / f"cut{cut}.db"
    logs = LogDir(tmp_path / f"cut{cut}")
    logs.append(b"".join(lines[:cut]))
    first = json.loads(_cli(db, "ingest", "--json", str(logs.root)).stdout)
    assert first["interrupted_runs"] > 0  # the grace had passed when reconcile looked
    logs.append(b"".join(lines[cut:]))
    assert _cli(db, "ingest", str(logs.root)).returncode == 0
    return _told(db), _told(tmp_path / f"at-once{cut}.db")


def _long_tool_call() -> list[bytes]:
    """Run R's exec ran 15 minutes, longer than the grace, then R called the model again (a minute ago); its
    other tool call never ended."""
    now = int(time.time() * 1000)
    t0 = now - 16 * 60_000
    call = {"provider": "openai", "model": "gpt-4o", "costUsd": 0.01, "delta": {"input": 100, "output": 10}}
    return [_ev(1, t0, "run.start", {"model": "gpt-4o", "provider": "openai"}),
            _ev(2, t0 + 2000, "llm.call", call),
            _ev(3, t0 + 3000, "tool.start", {"toolName": "exec", "toolCallId": "T1"}),
            _ev(4, t0 + 4000, "tool.start", {"toolName": "browser", "toolCallId": "T2"}),
            _ev(5, now - 60_000, "tool.end", {"toolName": "exec", "toolCallId": "T1", "isError": False}),
            _ev(6, now - 57_000, "llm.call", call)]


def test_a_telemetry_run_cut_off_during_a_long_tool_call_runs_again_when_it_goes_on(tmp_path):
    """Reconcile, passing during the long exec, cut off the run and its tool calls. The tool's end and the
    run's next model call say the run goes on; the other tool, never ended, stays cut off."""
    lines = _long_tool_call()
    for cut in (3, 4):
        in_two, at_once = _telemetry_in_two_and_at_once(tmp_path, lines, cut)
        assert in_two == at_once, cut
        assert [r["status"] for r in in_two["runs"]] == ["running"]
        assert [(t["tool_call_id"], t["status"]) for t in in_two["run"][0]["tool_calls_list"]] == [
            ("T1", "ok"), ("T2", "interrupted")]
        assert (in_two["usage"]["interrupted_runs"], in_two["usage"]["open_runs"]) == (0, 1)


def test_a_subagent_cut_off_whose_child_writes_again_and_the_run_waiting_on_it_run_again(tmp_path):
    """Reconcile cut off a subagent silent past the grace, its child's run, and the run that spawned it with
    its spawn's tool call. The child was only slow: its next model call opens all of them again."""
    now = int(time.time() * 1000)
    t0, kid = now - 20 * 60_000, "agent:main:subagent:kid"
    lines = [_ev(1, t0, "run.start", {"model": "gpt-4o", "provider": "openai"}),
             _ev(2, t0 + 10, "tool.start", {"toolName": "sessions_spawn", "toolCallId": "T1"}),
             _ev(3, t0 + 20, "subagent.spawn", {"childSessionKey": kid, "agentId": "main", "label": "k", "mode": "run"}),
             _ev(4, t0 + 2000, "run.start", {"model": "gpt-4o", "provider": "openai"},
                 sessionKey=kid, sessionId="K", runId="RK"),
             _ev(5, now - 3000, "llm.call", {"provider": "openai", "model": "gpt-4o", "costUsd": 0.01,
                                              "delta": {"input": 100, "output": 10}},
                 sessionKey=kid, sessionId="K", runId="RK")]
    in_two, at_once = _telemetry_in_two_and_at_once(tmp_path, lines, 4)
    assert in_two == at_once
    assert [s["status"] for s in in_two["subagents"]] == ["running"]
    assert sorted((r["run_id"], r["status"]) for r in in_two["runs"]) == [("R", "running"), ("RK", "running")]
    assert [t["status"] for r in in_two["run"] for t in r["tool_calls_list"]] == ["running"]
    assert (in_two["usage"]["interrupted_runs"], in_two["usage"]["open_runs"]) == (0, 2)


def test_serve_shows_a_run_it_cut_off_running_again_once_it_goes_on(tmp_path):
    """The hot view's current run, /v1/usage and the runs gauges follow the run back, as they followed its cut."""
    lines = _long_tool_call()
    logs = LogDir(tmp_path / "logs")
    logs.append(b"".join(lines[:4]))
    served = Served.on(tmp_path, logs.root)
    served.start()
    try:
        served.wait_ready()

        def told() -> tuple:
            usage, hot = served.get("/v1/usage")[1], served.get("/v1/sessions/agent:main:main/hot")[1]
            with urllib.request.urlopen(served.url + "/metrics", timeout=10) as r:
                gauges = dict(re.findall(r"^agentledger_runs_(running|interrupted) (\S+)$", r.read().decode(), re.M))
            return (usage["interrupted_runs"], usage["open_runs"], hot["current_run"], gauges["interrupted"],
                    gauges["running"])

        wait_for(lambda: told() == (1, 0, None, "1.0", "0.0"), what="the run cut off")
        logs.append(b"".join(lines[4:]))
        wait_for(lambda: told() == (0, 1, "R", "0.0", "1.0"), what="the run running again")
    finally:
        assert served.stop() == 0, served.log()
    _verify(served.db)
