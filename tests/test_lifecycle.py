"""Session lifecycle: gateway restarts suspend sessions, resets link instances, crashes interrupt.

Each scenario is a real telemetry log on disk, ingested into a real ledger; what is checked is
what a user sees (statuses, interrupted counts, costs) and that `verify` stays clean.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import followed_then_afresh, ingest
from ledgerdump import dump, rows, scalar
from logwriter import LogDir

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.verify import check_rollups
from agentledger.ledger.writer import LedgerWriter
from agentledger.timeutil import iso

T0 = 1_790_000_000_000
MIN = 60_000
KEY = "agent:main:main"


class Log:
    """Builds one gateway's events: ids and ``seq`` numbered as a gateway process would."""

    def __init__(self):
        self.n = 0
        self.seq = 0
        self.lines: list[bytes] = []

    def restart(self) -> None:
        self.seq = 0

    def ev(self, ts: int, kind: str, data: dict | None = None, *, key: str = KEY, sid: str = "S1",
           run: str | None = None, agent: str = "main") -> Log:
        self.n += 1
        e = {"id": f"evt_{self.n:016x}", "ts": ts, "seq": self.seq, "agentId": agent, "sessionKey": key,
             "sessionId": sid, "kind": kind, "data": data or {}, "source": "hook"}
        if run is not None:
            e["runId"] = run
        self.seq += 1
        self.lines.append(orjson.dumps(e) + b"\n")
        return self

    def call(self, ts: int, run: str, cost_usd: float, *, key: str = KEY, sid: str = "S1") -> Log:
        return self.ev(ts, "llm.call", {"provider": "anthropic", "model": "m", "costUsd": cost_usd,
                                        "delta": {"input": 1, "output": 1, "total": 2}}, key=key, sid=sid, run=run)

    def write(self, root: Path, lines: slice = slice(None)) -> LogDir:
        logs = LogDir(root)
        logs.append(b"".join(self.lines[lines]))
        return logs


def _q(db: Path, fn, *args, **kwargs):
    conn = open_reader(db)
    try:
        return fn(conn, *args, **kwargs)
    finally:
        conn.close()


def _verify(db: Path) -> None:
    assert _q(db, check_rollups) == []


def _session(db: Path, sid: str) -> dict:
    (row,) = _q(db, queries.sessions, queries.Window(), session_ids=[sid])
    return row


def _reconcile(db: Path, now: int, grace_s: float = 600):
    conn = open_writer(db)
    try:
        return reconcile(LedgerWriter(conn), now, grace_s)
    finally:
        conn.close()


def _usage(db: Path) -> dict:
    return _q(db, queries.usage, queries.Window())


def _restart_mid_session() -> Log:
    """S1 runs R1 and R2; the gateway restarts while R1 is open; S1 comes back with R3."""
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.ev(T0 + 1000, "run.start", run="R1").call(T0 + 2000, "R1", 0.5)
    log.ev(T0 + 3000, "tool.start", {"toolName": "exec", "toolCallId": "T1"}, sid="unknown", run="R1")
    log.restart()
    log.ev(T0 + 2 * MIN, "session.start", {"sessionId": "S9"}, key="unknown", sid="S9")
    log.ev(T0 + 5 * MIN, "run.start", run="R3").call(T0 + 5 * MIN + 10, "R3", 0.25)
    log.ev(T0 + 6 * MIN, "run.end", run="R3")
    return log


def test_seq_reset_suspends_the_open_session_and_interrupts_its_run_at_once(tmp_path, db):
    _restart_mid_session().write(tmp_path / "state")
    ingest(db, tmp_path / "state")
    assert scalar(db, "SELECT cause FROM gateway_restarts") == "seq"
    assert scalar(db, "SELECT status FROM runs WHERE run_id = 'R1'") == "interrupted"
    assert scalar(db, "SELECT status FROM tool_calls WHERE tool_call_id = 'T1'") == "interrupted"
    u = _usage(db)
    assert (u["interrupted_runs"], u["open_runs"], u["runs"]) == (1, 0, 2)
    s1 = _session(db, "S1")
    # Away from the last event before the restart to its next event.
    assert (s1["status"], s1["suspensions"], s1["suspended_s"]) == ("active", 1, (5 * MIN - 3000) / 1000)
    assert s1["cost_usd"] == 0.75
    assert _session(db, "S9")["suspensions"] == 0
    _verify(db)


def test_restart_detection_survives_any_batch_cut_and_daemon_restart(tmp_path):
    log = _restart_mid_session()
    whole = tmp_path / "whole.db"
    log.write(tmp_path / "whole")
    ingest(whole, tmp_path / "whole")
    for cut in range(1, len(log.lines)):
        shutil.rmtree(tmp_path / "whole")  # the same directory: the log is known by where it is
        db = tmp_path / f"cut{cut}.db"
        logs = log.write(tmp_path / "whole", slice(0, cut))
        root = logs.root
        ingest(db, root, batch_lines=2)
        logs.append(b"".join(log.lines[cut:]))
        ingest(db, root, batch_lines=3)
        assert dump(db) == dump(whole), cut


def test_a_line_slightly_out_of_order_is_not_a_restart(tmp_path, db):
    log = Log()
    for i in range(10):
        log.ev(T0 + i * 1000, "run.start" if i == 0 else "llm.input", sid="S1", run="R1")
    log.lines[5], log.lines[6] = log.lines[6], log.lines[5]  # seq 6 written before seq 5, a ms later
    log.write(tmp_path / "state")
    ingest(db, tmp_path / "state")
    assert scalar(db, "SELECT count(*) FROM gateway_restarts") == 0
    assert scalar(db, "SELECT status FROM runs") == "running"


@pytest.mark.parametrize("order", [(1, 0), (0, 2, 1), (0, 2, 3, 1)], ids=str)
def test_a_gateways_first_lines_written_out_of_order_are_no_restart(tmp_path, db, order):
    """Near a process's start, a line written out of order steps back to about 0 as a new process's
    first line does: ms apart, it is the same process."""
    log = Log()
    log.ev(T0, "run.start", run="R1")
    for i in range(1, max(order) + 1):
        log.ev(T0, "llm.input", run="R1")
    by_seq = {orjson.loads(line)["seq"]: line for line in log.lines}
    log.lines = [orjson.dumps(orjson.loads(by_seq[seq]) | {"ts": T0 + n}) + b"\n" for n, seq in enumerate(order)]
    log.write(tmp_path / "state")
    ingest(db, tmp_path / "state")
    assert scalar(db, "SELECT count(*) FROM gateway_restarts") == 0
    assert scalar(db, "SELECT status FROM runs") == "running"
    assert _session(db, "S1")["suspensions"] == 0


def test_a_gateway_back_within_seconds_after_a_few_lines_is_a_restart(tmp_path, db):
    log = Log()
    log.ev(T0, "run.start", run="R1").call(T0 + 100, "R1", 0.5)
    log.restart()
    log.ev(T0 + 2100, "run.start", run="R2")
    log.write(tmp_path / "state")
    ingest(db, tmp_path / "state")
    assert scalar(db, "SELECT cause FROM gateway_restarts") == "seq"
    assert scalar(db, "SELECT status FROM runs WHERE run_id = 'R1'") == "interrupted"


def test_an_idle_gap_counts_as_a_restart_with_the_configured_idle_time(tmp_path, db):
    log = Log()
    log.ev(T0, "run.start", run="R1").ev(T0 + 1000, "run.end", run="R1")
    log.ev(T0 + 10 * MIN, "run.start", run="R2").ev(T0 + 10 * MIN + 1000, "run.end", run="R2")
    log.write(tmp_path / "state")
    out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "ingest", "--json", "--idle", "300",
                          str(tmp_path / "state")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert scalar(db, "SELECT cause FROM gateway_restarts") == "idle"
    s1 = _session(db, "S1")
    assert (s1["status"], s1["suspensions"], s1["suspended_s"]) == ("active", 1, 10 * 60 - 1)
    bad = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "ingest", "--idle", "0",
                          str(tmp_path / "state")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--idle" in bad.stderr


def _busy_through_a_silence(*, keyed: bool = True, late_run: bool = False) -> tuple[Log, int]:
    """S1's log falls silent longer than the idle time while a tool runs (a restart, by rule); then its
    tool calls, which name only the key and their run, go on every two minutes. ``late_run``: they and the
    one across the silence are of R2, whose session no line names until the last; ``keyed=False``: nor
    does any line say S1's key, so only their run tells whose they are. Returns the log and the first
    event after the silence."""
    log = Log()
    key = KEY if keyed else "unknown"
    run = "R2" if late_run else "R1"
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.ev(T0 + 1000, "run.start", key=key, run="R1")
    log.ev(T0 + 2000, "llm.call", {"provider": "anthropic", "model": "m", "costUsd": 0.5}, key=key, run="R1")
    log.ev(T0 + 3000, "tool.start", {"toolName": "build", "toolCallId": "T0"}, key=key, sid="unknown", run=run)
    back = T0 + 3000 + 35 * MIN
    log.ev(back, "tool.end", {"toolName": "build", "toolCallId": "T0"}, key=key, sid="unknown", run=run)
    for i in range(1, 6):
        call = {"toolName": "exec", "toolCallId": f"T{i}"}
        ts = back + i * 2 * MIN
        if i == 1:  # an end written before its start
            log.ev(ts + 1000, "tool.end", call, key=key, sid="unknown", run=run)
            log.ev(ts, "tool.start", call, key=key, sid="unknown", run=run)
        else:
            log.ev(ts, "tool.start", call, key=key, sid="unknown", run=run)
            log.ev(ts + 1000, "tool.end", call, key=key, sid="unknown", run=run)
    if late_run:
        log.ev(back + 11 * MIN, "llm.call", {"provider": "anthropic", "model": "m", "costUsd": 0.25}, key=key,
               run="R2")
    else:
        log.ev(back + 11 * MIN, "tool.start", {"toolName": "exec", "toolCallId": "T6"}, key=key, sid="unknown",
               run="R1")
    return log, back


def test_tool_calls_after_a_silence_bring_their_session_back(tmp_path, db):
    log, back = _busy_through_a_silence()
    ingest(db, log.write(tmp_path / "state").root)
    assert scalar(db, "SELECT cause FROM gateway_restarts") == "idle"
    # Half a minute after its last tool call, long past the grace after the restart: it never left.
    assert _reconcile(db, back + 11 * MIN + 30_000).interrupted_sessions == 0
    s1 = _session(db, "S1")
    assert (s1["status"], s1["suspensions"], s1["suspended_s"], s1["suspended_since"]) == (
        "active", 1, (back - T0 - 3000) / 1000, None)
    assert s1["tool_calls"] == 7
    _verify(db)


@pytest.mark.parametrize("keyed", [True, False])
def test_tool_calls_bring_their_session_back_alike_however_the_lines_are_batched(tmp_path, keyed):
    """R2's tool calls come before any line says whose R2 is, one's end before its start: read in one
    go, line by line or cut anywhere, they bring S1 back at the first of them."""
    log, back = _busy_through_a_silence(keyed=keyed, late_run=True)
    whole = tmp_path / "whole.db"
    ingest(whole, log.write(tmp_path / "state").root)
    s1 = _session(whole, "S1")
    assert (s1["status"], s1["suspended_s"]) == ("active", (back - T0 - 3000) / 1000)
    _verify(whole)
    lines = tmp_path / "lines.db"
    ingest(lines, tmp_path / "state", batch_lines=1)
    assert dump(lines) == dump(whole)
    for cut in range(1, len(log.lines)):
        shutil.rmtree(tmp_path / "state")  # the same directory: the log is known by where it is
        db = tmp_path / f"cut{cut}.db"
        logs = log.write(tmp_path / "state", slice(0, cut))
        ingest(db, logs.root, batch_lines=3)
        logs.append(b"".join(log.lines[cut:]))
        ingest(db, logs.root, batch_lines=2)
        assert dump(db) == dump(whole), cut


@pytest.mark.parametrize("kind", ["tool", "compaction"])
def test_lines_of_a_new_instance_its_key_alone_names_leave_the_one_before_suspended(tmp_path, kind):
    """After a restart S2 starts with no key (session.start names none); R2's tool calls, or a compaction,
    come before any line names S2 with the key. Until then the key still leads to S1: read line by line,
    as a followed log is, they must not bring S1 back, just as read in one go."""
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key=KEY, sid="S1")
    log.ev(T0 + 1000, "run.start", run="R1", sid="S1")
    log.call(T0 + 2000, "R1", 0.5)
    log.restart()
    log.ev(T0 + 2 * MIN, "session.start", {"sessionId": "S2"}, key="unknown", sid="S2")
    if kind == "tool":
        log.ev(T0 + 3 * MIN, "tool.start", {"toolName": "exec", "toolCallId": "T9"}, sid="unknown", run="R2")
        log.ev(T0 + 3 * MIN + 100, "tool.end", {"toolName": "exec", "toolCallId": "T9"}, sid="unknown", run="R2")
    else:
        log.ev(T0 + 3 * MIN, "compaction.start", {"messageCount": 40, "compactingCount": 30, "tokenCount": 80_000},
               sid="unknown")
        log.ev(T0 + 3 * MIN + 100, "compaction.end", {"messageCount": 11, "compactedCount": 30}, sid="unknown")
    log.ev(T0 + 4 * MIN, "run.start", sid="S2", run="R2")
    log.call(T0 + 4 * MIN + 10, "R2", 0.25, sid="S2")
    whole = tmp_path / "whole.db"
    ingest(whole, log.write(tmp_path / "state").root)
    s1 = _session(whole, "S1")
    assert (s1["status"], s1["suspended_s"]) == ("suspended", 0)
    assert _session(whole, "S2")["status"] == "active"
    lines = tmp_path / "lines.db"
    ingest(lines, tmp_path / "state", batch_lines=1)
    assert dump(lines) == dump(whole)
    _verify(lines)


def _reset() -> Log:
    """S1 holds the key; S2 starts as its reset. Tool and compaction events of S2, carrying only the key,
    come before any event names S2 with the key."""
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.ev(T0 + 1000, "run.start", run="R1").call(T0 + 2000, "R1", 1.0).ev(T0 + 3000, "run.end", run="R1")
    log.ev(T0 + MIN, "session.start", {"sessionId": "S2", "resumedFrom": "S1"}, key="unknown", sid="S2")
    log.ev(T0 + MIN + 100, "tool.start", {"toolName": "read", "toolCallId": "T1"}, sid="unknown", run="R2")
    log.ev(T0 + MIN + 200, "tool.end", {"toolName": "read", "toolCallId": "T1", "isError": True},
           sid="unknown", run="R2")
    log.ev(T0 + MIN + 300, "compaction.start", {"messageCount": 40, "compactingCount": 30, "tokenCount": 80_000},
           sid="unknown")
    log.ev(T0 + MIN + 400, "compaction.end", {"messageCount": 11, "compactedCount": 30}, sid="unknown")
    log.ev(T0 + MIN + 500, "llm.call", {"provider": "anthropic", "model": "m", "costUsd": 0.5,
                                        "context": {"limit": 200_000, "used": 20_000}}, sid="S2", run="R2")
    log.ev(T0 + MIN + 600, "run.start", sid="S2", run="R2").ev(T0 + MIN + 700, "run.end", sid="S2", run="R2")
    log.ev(T0 + 2 * MIN, "session.end", {"sessionId": "S2", "messageCount": 12, "durationMs": MIN}, key="unknown",
           sid="S2")
    return log


def test_a_reset_ends_the_old_instance_and_links_the_new_one_under_the_key(tmp_path, db):
    _reset().write(tmp_path / "state")
    ingest(db, tmp_path / "state")
    s1, s2 = _session(db, "S1"), _session(db, "S2")
    assert (s1["status"], s1["end_reason"], s1["ended_at"]) == ("ended", "reset", s2["started_at"])
    assert (s2["session_key"], s2["resumed_from"], s2["status"], s2["end_reason"]) == (KEY, "S1", "ended", "end")
    assert (s2["message_count"], s2["reported_duration_ms"]) == (12, MIN)
    # The key-only tool calls landed on S2, not on the key's older instance.
    assert (s2["tool_calls"], s2["tool_errors"], s1["tool_calls"]) == (1, 1, 0)
    detail = _q(db, queries.session_detail, KEY)
    assert [i["session_id"] for i in detail["instances"]] == ["S2", "S1"]
    (c,) = detail["compactions"]
    assert (c["session_id"], c["messages_before"], c["messages_after"], c["tokens_before"], c["tokens_after"]) == (
        "S2", 40, 11, 80_000, 20_000)
    assert (c["compaction_ratio"], c["ratio_basis"], c["duration_ms"]) == (4.0, "tokens", 100)
    assert _q(db, queries.session_detail, "S1")["compactions"] == []
    kinds = [(i["kind"], i["what"]) for i in _q(db, queries.timeline, KEY, ["session", "compaction"])]
    assert kinds == [("session", "started"), ("session", "ended (reset)"), ("session", "started (reset of S1)"),
                     ("compaction", "40→11 messages, 80000→20000 tokens (×4.0 by tokens)"),
                     ("session", "ended (end)")]
    assert _usage(db)["compactions"] == 1
    _verify(db)


@pytest.mark.parametrize("cut", [None, 1, 2])
def test_a_reset_named_only_by_its_start_takes_the_key_however_the_lines_are_batched(tmp_path, cut):
    """S3 is told only by its start, which names S2; S2's key is learnt in the same lines."""
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S2"}, key="unknown", sid="S2")
    log.ev(T0 + 1000, "run.start", sid="S2", run="R1")
    log.ev(T0 + 4000, "session.start", {"sessionId": "S3", "resumedFrom": "S2"}, key="unknown", sid="S3")
    db = tmp_path / "l.db"
    if cut is not None:
        log.write(tmp_path / "state", slice(None, cut))
        ingest(db, tmp_path / "state")
    log.write(tmp_path / "state", slice(cut, None))
    ingest(db, tmp_path / "state")
    assert (_session(db, "S2")["session_key"], _session(db, "S3")["session_key"]) == (KEY, KEY)
    _verify(db)


@pytest.mark.parametrize("cycle", [False, True])
@pytest.mark.parametrize("batch_lines", [1, 10_000])
@pytest.mark.parametrize("cut", [None, 1, 2, 3])
def test_a_chain_of_resets_takes_the_key_all_along_however_the_lines_are_batched(tmp_path, cut, batch_lines, cycle):
    """S1 → S2 → S3 by resets told only by their starts; only S3's lines say the key, two resets from S1.
    ``cycle``: S1 says it resumed S3, a loop no walk along the chain may follow for ever."""
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1", **({"resumedFrom": "S3"} if cycle else {})}, key="unknown")
    log.ev(T0 + 1000, "session.start", {"sessionId": "S2", "resumedFrom": "S1"}, key="unknown", sid="S2")
    log.ev(T0 + 2000, "session.start", {"sessionId": "S3", "resumedFrom": "S2"}, key="unknown", sid="S3")
    log.ev(T0 + 3000, "run.start", sid="S3", run="R1")
    db = tmp_path / "l.db"
    if cut is not None:
        log.write(tmp_path / "state", slice(None, cut))
        ingest(db, tmp_path / "state", batch_lines=batch_lines)
    log.write(tmp_path / "state", slice(cut, None))
    ingest(db, tmp_path / "state", batch_lines=batch_lines)
    assert [_session(db, sid)["session_key"] for sid in ("S1", "S2", "S3")] == [KEY, KEY, KEY]
    assert [i["session_id"] for i in _q(db, queries.session_detail, KEY)["instances"]] == ["S3", "S2", "S1"]
    assert [(_session(db, sid)["status"], _session(db, sid)["end_reason"]) for sid in ("S1", "S2")] == [
        ("ended", "reset")] * 2
    _verify(db)


def _read_cut(tmp_path: Path, log: Log, cut: int | None) -> tuple[Path, LogDir]:
    """A ledger of ``log`` read in one ingest (``cut`` None), or in two, the first of its first ``cut`` lines;
    and the log directory, to write more to."""
    db = tmp_path / "l.db"
    logs = log.write(tmp_path / "state", slice(None, cut))
    if cut is not None:
        ingest(db, logs.root)
        logs.append(b"".join(log.lines[cut:]))
    ingest(db, logs.root)
    return db, logs


@pytest.mark.parametrize("cut", [None, 3])
def test_a_session_end_read_after_a_subagent_end_keeps_the_earlier_time(tmp_path, cut):
    """The child's subagent.end says it ended before its session.end line: that time stands, with the
    stronger reason the session.end gives, whether the two are read together or apart."""
    child = "agent:main:subagent:c1"
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "C"}, key="unknown", sid="C")
    log.ev(T0 + 1000, "run.start", key=child, sid="C", run="RC")
    log.ev(T0 + 9000, "subagent.end", {"targetSessionKey": child, "outcome": "ok", "endedAt": T0 + 8000}, key=child,
           sid="unknown", run="RC")
    log.ev(T0 + 10_000, "session.end", {"sessionId": "C", "messageCount": 3, "durationMs": 100}, key="unknown",
           sid="C")
    db, _ = _read_cut(tmp_path, log, cut)
    c = _session(db, "C")
    (sub,) = _q(db, queries.subagents, queries.Window())
    assert (c["status"], c["end_reason"], c["ended_at"], c["message_count"]) == ("ended", "end", sub["ended_at"], 3)
    _verify(db)


@pytest.mark.parametrize("cut", [None, 4])
def test_a_session_end_read_after_its_reset_keeps_the_reset_time(tmp_path, cut):
    """S2's start resets S1 ten seconds before a session.end for S1 is written: S1 ended when S2 started,
    for reset, whether the session.end is read with the reset or in a later ingest."""
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.ev(T0 + 1000, "run.start", run="R1").ev(T0 + 2000, "run.end", run="R1")
    log.ev(T0 + 10_000, "session.start", {"sessionId": "S2", "resumedFrom": "S1"}, key="unknown", sid="S2")
    log.ev(T0 + 20_000, "session.end", {"sessionId": "S1", "messageCount": 3, "durationMs": 5}, key="unknown")
    db, _ = _read_cut(tmp_path, log, cut)
    s1, s2 = _session(db, "S1"), _session(db, "S2")
    assert (s1["status"], s1["end_reason"], s1["ended_at"]) == ("ended", "reset", s2["started_at"])
    _verify(db)


def test_key_only_events_are_reattributed_when_the_mapping_is_learnt(tmp_path, db):
    log = _reset()
    # Without resumedFrom, nothing says S2 belongs to the key until its run starts.
    log.lines[4] = log.lines[4].replace(b',"resumedFrom":"S1"', b"")
    assert b"S2" in log.lines[4] and b"resumedFrom" not in log.lines[4]
    cut = len(log.lines) - 4  # before the llm.call: S2 has no key yet
    logs = log.write(tmp_path / "state", slice(0, cut))
    ingest(db, tmp_path / "state")
    assert scalar(db, "SELECT session_id FROM compaction_pairs") == "S1"
    assert _session(db, "S2")["session_key"] is None
    logs.append(b"".join(log.lines[cut:]))
    ingest(db, tmp_path / "state")
    assert scalar(db, "SELECT session_id FROM compaction_pairs") == "S2"
    assert [(r[0], r[2]) for r in _q(db, lambda c: c.execute(
        "SELECT session_id, valid_from_ms, valid_until_ms FROM session_ids ORDER BY valid_from_ms").fetchall())] == [
        ("S1", T0 + MIN), ("S2", None)]
    assert _session(db, "S2")["tool_calls"] == 1
    _verify(db)


def test_a_crash_with_no_end_is_interrupted_and_a_late_end_wins(tmp_path, db):
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.ev(T0 + 1000, "run.start", run="R1").call(T0 + 2000, "R1", 1.0)
    log.ev(T0 + 2500, "subagent.spawn", {"childSessionKey": "agent:main:subagent:c"}, sid="unknown", run="R1")
    log.ev(T0 + 2600, "run.start", key="agent:main:subagent:c", sid="C", run="RC")
    log.restart()  # the gateway crashed; the new one serves someone else
    log.ev(T0 + 3 * MIN, "session.start", {"sessionId": "S9"}, key="unknown", sid="S9")
    logs = log.write(tmp_path / "state")
    ingest(db, logs.root)
    assert _usage(db)["interrupted_runs"] == 2
    assert scalar(db, "SELECT status FROM subagents") == "interrupted"
    assert _session(db, "S1")["status"] == "suspended"
    done = _reconcile(db, T0 + 3 * MIN + 60_000)
    assert (done.interrupted_sessions, done.runs) == (0, 0)  # within the grace
    done = _reconcile(db, T0 + 60 * MIN)
    assert done.interrupted_sessions == 2  # S1 and the child C never came back
    assert (_session(db, "S1")["status"], _session(db, "S9")["status"]) == ("interrupted", "active")
    assert _reconcile(db, T0 + 60 * MIN).interrupted_sessions == 0  # idempotent
    _verify(db)

    # The ends turn up after all: the real outcomes replace "interrupted", and rollups follow.
    log.ev(T0 + 61 * MIN, "run.end", run="R1")
    log.ev(T0 + 61 * MIN + 1, "subagent.end", {"targetSessionKey": "agent:main:subagent:c", "outcome": "ok"},
           key="agent:main:subagent:c", sid="unknown", run="R1")
    log.ev(T0 + 62 * MIN, "session.end", {"sessionId": "S1", "messageCount": 3, "durationMs": 62 * MIN},
           key="unknown")
    logs.append(b"".join(log.lines[-3:]))
    ingest(db, logs.root)
    u = _usage(db)
    assert (u["interrupted_runs"], u["failed_runs"], u["runs"]) == (1, 0, 2)  # RC never ended
    assert scalar(db, "SELECT status FROM runs WHERE run_id = 'R1'") == "ok"
    assert scalar(db, "SELECT outcome FROM subagents") == "ok"
    s1 = _session(db, "S1")
    assert (s1["status"], s1["end_reason"], s1["suspensions"], s1["suspended_since"]) == ("ended", "end", 1, None)
    assert s1["suspended_s"] == (61 * MIN - 2600) / 1000
    assert _session(db, "C")["end_reason"] == "subagent"
    _verify(db)


def _spawning(child: str) -> Log:
    """S1's run R1, which spawned ``child``."""
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.ev(T0 + 1000, "run.start", run="R1")
    log.ev(T0 + 2000, "subagent.spawn", {"childSessionKey": child, "label": "x", "mode": "run"}, sid="unknown",
           run="R1")
    return log


@pytest.mark.parametrize("cut", [None, 2, 3])
def test_a_restart_interrupts_at_once_a_subagent_that_never_wrote_a_line_and_a_late_end_wins(tmp_path, cut):
    """The child of S1's run dies with the gateway though no line of its own was read; however the lines
    before the restart were batched."""
    child = "agent:main:subagent:c"
    log = _spawning(child)
    log.restart()
    log.ev(T0 + MIN, "run.start", run="R2")
    db, logs = _read_cut(tmp_path, log, cut)

    def subagent() -> tuple:
        (row,) = _q(db, queries.subagents, queries.Window())
        return row["status"], row["outcome"]

    assert subagent() == ("interrupted", None)
    assert _session(db, "S1")["status"] == "active"
    _verify(db)

    log.ev(T0 + MIN + 1000, "subagent.end", {"targetSessionKey": child, "outcome": "ok"}, key=child, sid="unknown",
           run="R1")
    logs.append(log.lines[-1])
    ingest(db, logs.root)
    assert subagent() == ("ended", "ok")
    _verify(db)


def test_what_a_restart_cut_off_stays_so_whatever_lines_of_it_come_later_however_they_are_batched(tmp_path):
    """R1, the subagent it spawned and the child's run were open when the gateway restarted: cut off at once.
    Lines of R1 and of the child written after the restart, no ends, do not open them again, whether they are
    read with the restart or after it (a later line of a run reconcile cut off does: see test_reconcile)."""
    child = "agent:main:subagent:c"
    log = _spawning(child)
    log.ev(T0 + 3000, "run.start", key=child, sid="C", run="RC")
    log.restart()
    log.ev(T0 + MIN, "run.start", run="R2")
    log.call(T0 + MIN + 1000, "R1", 0.5)
    log.call(T0 + MIN + 2000, "RC", 0.25, key=child, sid="C")
    whole = tmp_path / "whole.db"
    ingest(whole, log.write(tmp_path / "state").root)
    assert rows(whole, "SELECT run_id, status FROM runs ORDER BY run_id") == [
        ("R1", "interrupted"), ("R2", "running"), ("RC", "interrupted")]
    assert scalar(whole, "SELECT status FROM subagents") == "interrupted"
    _verify(whole)
    for cut in range(1, len(log.lines)):
        shutil.rmtree(tmp_path / "state")  # the same directory: the log is known by where it is
        db = tmp_path / f"cut{cut}.db"
        logs = log.write(tmp_path / "state", slice(0, cut))
        ingest(db, logs.root)
        logs.append(b"".join(log.lines[cut:]))
        ingest(db, logs.root)
        assert dump(db) == dump(whole), cut


@pytest.mark.parametrize("cause", ["seq", "idle"])
def test_a_session_idle_before_a_restart_has_the_grace_from_the_restart_to_come_back(tmp_path, db, cause):
    log = Log()
    log.ev(T0, "run.start", run="R1").ev(T0 + 1000, "run.end", run="R1")
    if cause == "seq":
        log.restart()
    restart = T0 + 40 * MIN  # longer than both the grace and the idle time after S1's last event
    log.ev(restart, "session.start", {"sessionId": "S9"}, key="unknown", sid="S9")
    logs = log.write(tmp_path / "state")
    ingest(db, logs.root)
    assert scalar(db, "SELECT cause FROM gateway_restarts") == cause
    assert _reconcile(db, restart + MIN).interrupted_sessions == 0
    assert _session(db, "S1")["status"] == "suspended"

    log.ev(restart + 9 * MIN, "run.start", run="R2")  # back within the grace
    logs.append(log.lines[-1])
    ingest(db, logs.root)
    assert _reconcile(db, restart + 9 * MIN + 1).interrupted_sessions == 0
    assert _session(db, "S1")["status"] == "active"

    log.restart()
    later = restart + 15 * MIN
    log.ev(later, "session.start", {"sessionId": "S8"}, key="unknown", sid="S8")
    logs.append(log.lines[-1])
    ingest(db, logs.root)
    assert (_session(db, "S1")["status"], _session(db, "S9")["status"]) == ("suspended", "suspended")
    assert _reconcile(db, later + 10 * MIN - 1).interrupted_sessions == 0
    assert _reconcile(db, later + 10 * MIN + 1).interrupted_sessions == 2  # neither came back: vanished
    assert (_session(db, "S1")["status"], _session(db, "S9")["status"]) == ("interrupted", "interrupted")
    _verify(db)


def _tree() -> tuple[Log, dict[str, int]]:
    """main → child → grandchild, each spending; a second child ends early."""
    log, own = Log(), {}
    keys = [KEY, "agent:main:subagent:c1", "agent:main:subagent:c2", "agent:main:subagent:c3"]
    parents = {keys[1]: keys[0], keys[2]: keys[1], keys[3]: keys[0]}
    costs = {keys[0]: 0.1, keys[1]: 0.02, keys[2]: 0.003, keys[3]: 0.0004}
    ts = T0
    for i, key in enumerate(keys):
        sid, run = f"S{i}", f"R{i}"
        if key in parents:
            log.ev(ts, "subagent.spawn", {"childSessionKey": key, "label": f"l{i}", "mode": "run"},
                   key=parents[key], sid="unknown", run=f"R{keys.index(parents[key])}")
        log.ev(ts + 1, "run.start", key=key, sid=sid, run=run)
        for j in range(3):
            log.call(ts + 2 + j, run, costs[key], key=key, sid=sid)
        own[key] = 3 * round(costs[key] * 10**12)
        ts += 1000
    for i, key in reversed(list(enumerate(keys))):
        log.ev(ts, "run.end", key=key, sid=f"S{i}", run=f"R{i}")
        if key in parents:
            log.ev(ts + 1, "subagent.end", {"targetSessionKey": key, "outcome": "ok"}, key=key, sid="unknown",
                   run=f"R{keys.index(parents[key])}")
        ts += 1000
    return log, own


def test_family_totals_of_a_three_level_tree_are_the_exact_sum_of_its_members(tmp_path, db):
    log, own = _tree()
    log.write(tmp_path / "state")
    ingest(db, tmp_path / "state")
    root = _q(db, queries.tree, KEY)
    by_key = {}

    def walk(node):
        by_key[node["session_key"]] = node
        for child in node["children"]:
            walk(child)

    walk(root)
    pico = own  # exact, in pico-dollars: a family is its own spend plus its children's families
    assert {k: round(n["own_cost_usd"] * 10**12) for k, n in by_key.items()} == pico
    c1 = by_key["agent:main:subagent:c1"]
    assert [c["session_key"] for c in c1["children"]] == ["agent:main:subagent:c2"]
    assert round(c1["cumulative_cost_usd"] * 10**12) == pico["agent:main:subagent:c1"] + pico["agent:main:subagent:c2"]
    assert round(root["cumulative_cost_usd"] * 10**12) == sum(pico.values())
    detail = _q(db, queries.session_detail, KEY)
    assert round(detail["cost_usd"] * 10**12) == pico[KEY]
    assert round(detail["family_cost_usd"] * 10**12) == sum(pico.values())
    assert {s["session_key"]: (s["status"], s["end_reason"]) for s in _q(db, queries.sessions, queries.Window())} == {
        KEY: ("active", None), **{k: ("ended", "subagent") for k in list(own)[1:]}}
    tree = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "tree", KEY, "--json"],
                          capture_output=True, text=True)
    assert json.loads(tree.stdout) == root
    _verify(db)


@pytest.mark.parametrize("new_process", [False, True])
def test_a_stretch_read_out_of_order_is_no_restart(tmp_path, db, new_process):
    """The tailer can meet the new live file before the rest of the one just rotated away."""
    old, new = Log(), Log()
    for i in range(40):  # 40 minutes of one session, a line a minute
        old.ev(T0 + i * MIN, "run.start" if i == 0 else "llm.input", run="R1")
    new.seq = 0 if new_process else 40
    new.n = 1000
    for i in range(3):
        new.ev(T0 + 40 * MIN + i * 1000, "llm.input", run="R1")
    lines = old.lines[:5] + new.lines + old.lines[5:]
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(lines))
    ingest(db, logs.root)
    causes = [c for (c,) in _q(db, lambda c: c.execute("SELECT cause FROM gateway_restarts").fetchall())]
    assert causes == (["seq"] if new_process else [])
    assert scalar(db, "SELECT count(*) FROM session_suspensions WHERE until_ms < from_ms") == 0


def test_a_copy_of_a_log_in_a_new_place_adds_nothing_and_rejects_nothing(tmp_path, db, oc_corpus):
    first = ingest(db, oc_corpus)
    before = dump(db)
    copy = tmp_path / "copy"
    shutil.copytree(oc_corpus / "agents", copy / "agents")  # every line already indexed, in logs never seen
    stats = ingest(db, oc_corpus, copy)
    assert stats.lines == first.lines and stats.events == 0 and stats.duplicates == first.events
    assert first.rejects and stats.rejects == 0  # its malformed lines are the ones rejected already
    assert {k: v for k, v in dump(db).items() if k not in ("files", "log_clocks", "checkpoints")} == \
        {k: v for k, v in before.items() if k not in ("files", "log_clocks", "checkpoints")}


def test_a_pause_in_a_log_without_a_process_counter_suspends_nothing(tmp_path, db):
    """Transcripts and hooks carry no seq: an hour's pause there is a person pausing, not a restart."""
    from agentledger.facts import LlmCall, RunStarted, Tokens
    from agentledger.ledger.writer import Batch

    conn = open_writer(db)
    writer = LedgerWriter(conn, idle_s=60)
    row = writer.add_file("claude-code", str(tmp_path), str(tmp_path / "p" / "s.jsonl"), b"fp", 0, 0, 0, "active")
    base = 1_790_000_000_000
    common = {"source": "claude-code", "agent_id": "claude-code", "session_key": "agent:claude-code:s",
              "session_id": "s", "run_id": "r1"}
    facts = [RunStarted(event_id=1, ts_ms=base, kind="run.start", **common),
             LlmCall(event_id=2, ts_ms=base + 1000, kind="llm.call", tokens=Tokens(total=5), **common),
             LlmCall(event_id=3, ts_ms=base + 3_600_000, kind="llm.call", tokens=Tokens(total=5), **common)]
    for n, fact in enumerate(facts):
        writer.apply(Batch(row.id, row.path, n * 10, n * 10 + 10, 1, 100, [(n * 10, 10, fact)]))
    assert scalar(db, "SELECT status FROM sessions WHERE session_id = 's'") != "suspended"
    assert scalar(db, "SELECT status FROM runs WHERE run_id = 'r1'") == "running"
    assert scalar(db, "SELECT count(*) FROM gateway_restarts") == 0
    conn.close()


def test_a_pass_over_many_logs_indexes_what_each_line_alone_would(tmp_path):
    """A live pass writes every file it read in one round of statements; restarts, resets and a
    subagent whose session lives in another agent's log must come out as line by line."""
    main, worker, other = Log(), Log(), Log()
    worker.n, other.n = 100, 200  # ids of their own
    main.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    main.ev(T0 + 1000, "run.start", run="R1").call(T0 + 2000, "R1", 0.5)
    main.ev(T0 + 2500, "subagent.spawn", {"childSessionKey": "agent:worker:subagent:c"}, sid="unknown", run="R1")
    child = dict(key="agent:worker:subagent:c", sid="C", agent="worker")
    worker.ev(T0 + 2600, "run.start", run="RC", **child).call(T0 + 2700, "RC", 0.125, key=child["key"], sid="C")
    worker.ev(T0 + 2800, "run.start", key="agent:worker:main", sid="W1", run="RW", agent="worker")
    worker.ev(T0 + 2900, "tool.start", {"toolName": "exec", "toolCallId": "T1"}, key="agent:worker:main", sid="W1",
              run="RW", agent="worker")
    worker.restart()  # the worker's gateway goes away with its run and tool call open
    worker.ev(T0 + 3 * MIN, "session.start", {"sessionId": "W9"}, key="agent:worker:main", sid="W9", agent="worker")
    main.ev(T0 + 4 * MIN, "subagent.end", {"targetSessionKey": "agent:worker:subagent:c", "outcome": "ok"},
            key="agent:worker:subagent:c", sid="unknown", run="R1")
    other.ev(T0, "session.start", {"sessionId": "O1"}, key="agent:other:main", sid="O1", agent="other")
    other.call(T0 + 10, "RO", 0.25, key="agent:other:main", sid="O1")
    other.ev(T0 + MIN, "session.start", {"sessionId": "O2", "resumedFrom": "O1"}, key="unknown", sid="O2",
             agent="other")
    other.call(T0 + MIN + 10, "RO2", 0.0625, key="agent:other:main", sid="O2")

    def write(root: Path) -> None:
        for agent, log in (("main", main), ("worker", worker), ("other", other)):
            logs = LogDir(root, agent)
            logs.append(b"".join(log.lines[:2]))
            logs.rotate()  # two files of one log in the same pass
            logs.append(b"".join(log.lines[2:]))

    dbs = {}
    for name, batch_lines in (("pass", 10_000), ("lines", 1)):
        shutil.rmtree(tmp_path / "state", ignore_errors=True)  # the same place: a log is known by where it is
        write(tmp_path / "state")
        dbs[name] = tmp_path / f"{name}.db"
        stats = ingest(dbs[name], tmp_path / "state", batch_lines=batch_lines)
        assert stats.events == len(main.lines) + len(worker.lines) + len(other.lines)
        _verify(dbs[name])
    assert dump(dbs["pass"]) == dump(dbs["lines"])
    assert scalar(dbs["pass"], "SELECT status FROM tool_calls WHERE tool_call_id = 'T1'") == "interrupted"
    assert _session(dbs["pass"], "W1")["status"] == "suspended"
    assert _session(dbs["pass"], "C")["end_reason"] == "subagent"
    assert _session(dbs["pass"], "O1")["end_reason"] == "reset"


def test_a_session_away_when_its_transcript_is_archived_comes_back_at_its_end(tmp_path, db):
    """An archive's end folds in as a line's end does: a session a gateway restart suspended is no longer
    away once it ended, and its time away stops at the end."""
    from agentledger.ledger.lifecycle import end_archived

    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.ev(T0 + 1000, "run.start", run="R1")
    log.restart()
    log.ev(T0 + 3 * MIN, "session.start", {"sessionId": "S9"}, key="unknown", sid="S9")
    ingest(db, log.write(tmp_path / "state").root)
    assert _session(db, "S1")["status"] == "suspended"
    conn = open_writer(db)
    try:
        with conn:
            assert end_archived(conn, {"S1": (("reset", T0 + 10 * MIN),)}) == {"S1"}
            assert end_archived(conn, {"S1": (("reset", T0 + 10 * MIN),)}) == set()  # idempotent
    finally:
        conn.close()
    s1 = _session(db, "S1")
    assert (s1["status"], s1["end_reason"], s1["suspensions"], s1["suspended_since"]) == ("ended", "reset", 1, None)
    assert s1["suspended_s"] == (10 * MIN - 1000) / 1000


HOUR = 60 * MIN
CHILD = "agent:worker:subagent:c"


def _clock_stepped_ahead(then: str) -> Log:
    """S1's run R1 has a tool call and a subagent open, and S2 is open with nothing more to say, when one
    line is stamped three hours ahead (the host clock stepped forward, then back to the real time). ``then``:
    R1 goes on at the real time and ends (``ends``) or stays open (``goes-on``); or the gateway restarts
    after a line back at the real time (``restarts``) or straight after the line stamped ahead
    (``restarts-at-once``)."""
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.call(T0 + 500, "R2", 0.0625, key="agent:main:other", sid="S2")
    log.ev(T0 + 1000, "run.start", run="R1").call(T0 + 2000, "R1", 0.5)
    log.ev(T0 + 2300, "subagent.spawn", {"childSessionKey": CHILD}, sid="unknown", run="R1")
    log.ev(T0 + 2500, "tool.start", {"toolName": "exec", "toolCallId": "T1"}, sid="unknown", run="R1")
    log.call(T0 + 3000 + 3 * HOUR, "R1", 0.25)
    if then != "restarts-at-once":
        log.call(T0 + 4000, "R1", 0.125)
    if then == "ends":
        log.ev(T0 + 5000, "tool.end", {"toolName": "exec", "toolCallId": "T1"}, sid="unknown", run="R1")
        log.ev(T0 + 5500, "subagent.end", {"targetSessionKey": CHILD, "outcome": "ok"}, key=CHILD, sid="unknown",
               run="R1")
        log.ev(T0 + 6000, "run.end", run="R1")
    elif then.startswith("restarts"):
        log.restart()
        log.ev(T0 + MIN, "session.start", {"sessionId": "S9"}, key="unknown", sid="S9")
        log.ev(T0 + MIN + 1000, "run.start", sid="S9", run="R9").call(T0 + MIN + 2000, "R9", 1.0, sid="S9")
    return log


def _read_every_way(tmp_path: Path, log: Log) -> Path:
    """The ledger of ``log`` read in one ingest, after checking that it is the same read in two ingests cut
    at any line, one line a batch, and followed live as each line is written."""
    whole = tmp_path / "whole.db"
    ingest(whole, log.write(tmp_path / "whole").root)
    ways = {f"cut at {cut}": cut for cut in range(1, len(log.lines))} | {"line by line": None}
    for way, cut in ways.items():
        shutil.rmtree(tmp_path / "whole")  # the same directory: the log is known by where it is
        db = tmp_path / f"{way}.db"
        logs = log.write(tmp_path / "whole", slice(0, cut or 0))
        ingest(db, logs.root, batch_lines=1 if cut is None else 20_000)
        logs.append(b"".join(log.lines[cut or 0:]))
        ingest(db, logs.root, batch_lines=1 if cut is None else 20_000)
        assert dump(db) == dump(whole), way
    shutil.rmtree(tmp_path / "whole")
    logs = LogDir(tmp_path / "whole")
    with followed_then_afresh(tmp_path, logs.root, fmt="oc-telemetry") as ledgers:
        for line in log.lines:
            logs.append(line)
            ledgers.pipeline.run_once()
    assert dump(ledgers.followed) == dump(ledgers.afresh) == dump(whole)
    return whole


@pytest.mark.parametrize("then", ["ends", "goes-on"])
def test_a_line_stamped_ahead_of_the_clock_is_no_silence_however_the_log_is_read(tmp_path, then):
    """Three hours between two lines read as a silence, a restart; the next line, stamped back at the real
    time, shows the clock had stepped ahead for one line: nothing was suspended, nothing cut off."""
    db = _read_every_way(tmp_path, _clock_stepped_ahead(then))
    assert scalar(db, "SELECT count(*) FROM gateway_restarts") == 0
    s1 = _session(db, "S1")
    assert (s1["status"], s1["suspensions"], s1["suspended_s"], s1["cost_usd"]) == ("active", 0, 0, 0.875)
    assert (_session(db, "S2")["status"], _session(db, "S2")["suspensions"]) == ("active", 0)
    want = ("ok", "ok", "ended") if then == "ends" else ("running", "running", "running")
    assert scalar(db, "SELECT status FROM runs WHERE run_id = 'R1'") == want[0]
    assert rows(db, "SELECT status FROM tool_calls UNION ALL SELECT status FROM subagents") == [want[1:2], want[2:]]
    assert _usage(db)["interrupted_runs"] == 0
    _verify(db)


@pytest.mark.parametrize("then", ["restarts", "restarts-at-once"])
def test_a_restart_after_a_line_stamped_ahead_of_the_clock_is_seen_however_the_log_is_read(tmp_path, then):
    """The gateway restarting a minute after the start is a restart, though the line before is stamped hours
    later; where the lines stamped ahead come last, the old process went some time after the line before them."""
    db = _read_every_way(tmp_path, _clock_stepped_ahead(then))
    went = T0 + (4000 if then == "restarts" else 2500)
    assert rows(db, "SELECT ts_ms, last_ms, cause FROM gateway_restarts") == [(T0 + MIN, went, "seq")]
    assert rows(db, "SELECT status FROM runs WHERE run_id = 'R1' UNION ALL SELECT status FROM tool_calls "
                    "UNION ALL SELECT status FROM subagents") == [("interrupted",)] * 3
    for sid in ("S1", "S2"):
        s = _session(db, sid)
        assert (s["status"], s["suspensions"], s["suspended_since"]) == ("suspended", 1, iso(went))
    assert _session(db, "S9")["status"] == "active"
    _verify(db)


def test_a_silence_whose_far_end_was_stamped_ahead_is_still_one_when_longer_than_the_idle_time(tmp_path, db):
    """A line back more than the idle time after the silence's near end leaves it a silence."""
    log = Log()
    log.ev(T0, "run.start", run="R1").call(T0 + 1000, "R1", 0.5)
    log.call(T0 + 3 * HOUR, "R1", 0.25).call(T0 + 40 * MIN, "R1", 0.125)
    ingest(db, log.write(tmp_path / "state").root)
    assert rows(db, "SELECT ts_ms, last_ms, cause FROM gateway_restarts") == [(T0 + 3 * HOUR, T0 + 1000, "idle")]
    assert scalar(db, "SELECT status FROM runs") == "interrupted"


def test_a_silence_taken_back_leaves_cut_off_what_the_restart_before_it_cut_off(tmp_path):
    log = Log()
    log.ev(T0, "session.start", {"sessionId": "S1"}, key="unknown")
    log.ev(T0 + 1000, "run.start", run="R0")
    log.restart()  # R0 dies with its gateway
    log.ev(T0 + MIN, "run.start", run="R1").call(T0 + MIN + 1000, "R1", 0.25)
    log.call(T0 + MIN + 2000 + 3 * HOUR, "R1", 0.125).call(T0 + MIN + 3000, "R1", 0.0625)
    db = _read_every_way(tmp_path, log)
    assert rows(db, "SELECT cause FROM gateway_restarts") == [("seq",)]
    assert rows(db, "SELECT run_id, status FROM runs ORDER BY run_id") == [("R0", "interrupted"), ("R1", "running")]
    assert (_session(db, "S1")["status"], _session(db, "S1")["suspensions"]) == ("active", 1)


def test_a_clock_stepped_ahead_twice_and_back_twice_undoes_both_silences_however_the_log_is_read(tmp_path):
    """Undoing the second silence leaves the first standing, to be undone in turn."""
    log = Log()
    log.ev(T0, "run.start", run="R1")
    log.call(T0 + 2 * HOUR, "R1", 0.5).call(T0 + 2 * HOUR + 1000, "R1", 0.25)  # two hours ahead
    log.call(T0 + 5 * HOUR, "R1", 0.125)  # five
    log.call(T0 + 2 * HOUR + 2000, "R1", 0.0625)  # two again
    log.call(T0 + 3000, "R1", 0.03125)  # none
    db = _read_every_way(tmp_path, log)
    assert scalar(db, "SELECT count(*) FROM gateway_restarts") == 0
    assert (scalar(db, "SELECT status FROM runs"), _session(db, "S1")["suspensions"]) == ("running", 0)
