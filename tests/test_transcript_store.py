"""OpenClaw's SQLite transcript store: read-only, every row once across runs, one event with its JSONL copy."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import orjson
import pytest
from conftest import cli_env, cli_json, followed_then_afresh, ingest, metric_counters, settle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledgerdump import rows, scalar
from test_transcript_sources import (
    SPAWN_ROW,
    SPAWNED,
    SPAWNER,
    _clean,
    _subagent_end,
    keys_seen,
    spawn_row,
    spawn_transcripts,
    write_spawn_index,
)

from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger import queries
from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.verify import check_rollups
from agentledger.ledger.writer import LedgerWriter
from agentledger.sources import oc_store
from agentledger.sources.oc_store import rows_naming
from agentledger.tail import transcript_store
from agentledger.tail.tailer import ReadBackFailed

SID = "3c9d7e1a-0000-4000-8000-000000000001"


def _entry(kind: str, entry: str, second: int, **fields) -> dict:
    return {"type": kind, "id": entry, "parentId": None, "timestamp": f"2026-10-01T08:00:{second:02d}.000Z", **fields}


def _user(entry: str, second: int) -> dict:
    return _entry("message", entry, second, message={"role": "user", "content": "hi", "timestamp": 1})


def _assistant(entry: str, second: int, cost: float = 0.01, tokens_in: int = 5) -> dict:
    return _entry("message", entry, second, message={
        "role": "assistant", "content": [], "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "stop",
        "usage": {"input": tokens_in, "output": 7, "cacheRead": 0, "cacheWrite": 0, "totalTokens": tokens_in + 7,
                  "cost": {"total": cost}}})


def _header(second: int = 0) -> dict:
    return {"type": "session", "version": 3, "id": SID, "timestamp": f"2026-10-01T08:00:{second:02d}.000Z"}


class Producer:
    """The gateway's side: a store in rollback-journal mode (the one where a reader could block a writer),
    written with no patience at all, so a reader holding a lock would make a write fail."""

    def __init__(self, state: Path, agent: str = "main"):
        (state / "agents" / agent / "sessions").mkdir(parents=True, exist_ok=True)
        (state / "agents" / agent / "agent").mkdir(parents=True, exist_ok=True)
        self.path = state / "agents" / agent / "agent" / "openclaw-agent.sqlite"
        self.conn = apsw.Connection(str(self.path))
        self.conn.execute("PRAGMA journal_mode = DELETE")
        self.conn.execute("CREATE TABLE IF NOT EXISTS transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                          "event_json TEXT, created_at INTEGER, PRIMARY KEY (session_id, seq))")
        self.seq = 0

    def add(self, *entries: dict | str | None, session: str = SID) -> None:
        self.conn.setbusytimeout(0)
        with self.conn:
            for e in entries:
                body = orjson.dumps(e, option=orjson.OPT_SORT_KEYS).decode() if isinstance(e, dict) else e
                self.conn.execute("INSERT INTO transcript_events VALUES (?, ?, ?, ?)", (session, self.seq, body, 0))
                self.seq += 1


def _index(state: Path, key: str = "agent:main:main", session: str = SID) -> None:
    (state / "agents" / "main" / "sessions" / "sessions.json").write_bytes(orjson.dumps({key: {"sessionId": session}}))


def test_rows_are_indexed_once_across_runs_while_the_producer_keeps_writing(tmp_path, db):
    state = tmp_path / "state"
    producer = Producer(state)
    _index(state)
    producer.add(_header(), _user("u1", 1), _assistant("a1", 2))
    conn = open_writer(db)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        pipeline.tailers[0][2].page_rows = 2  # several short reads per session
        # The producer writes between the reader's pages: nothing of ours holds its store.
        pipeline.after_commit = lambda result: producer.add(_user(f"u{producer.seq}", 3),
                                                                   _assistant(f"a{producer.seq + 1}", 4)) \
            if producer.seq < 9 else None
        first = pipeline.catch_up()
    finally:
        conn.close()
    assert first.lines == 9  # the rows appended while it read included
    producer.add(_user("late", 20), _assistant("late-a", 21))
    assert ingest(db, state, fmt="oc-transcript").lines == 2  # a new process: from the checkpoint on
    assert ingest(db, state, fmt="oc-transcript").lines == 0
    assert scalar(db, "SELECT count(*) FROM llm_calls") == 5
    assert rows(db, "SELECT DISTINCT session_key, source FROM llm_calls") == [("agent:main:main", "oc-transcript")]
    assert rows(db, "SELECT path, offset, lines FROM files") == [(f"{producer.path}#{SID}", 11, 11)]
    _clean(db)


def test_a_store_with_a_fifo_for_its_journal_is_told_unreadable_not_waited_on(tmp_path, db):
    # SQLite opens a journal it finds beside the store to read it back: a FIFO there waited for a writer.
    state = tmp_path / "state"
    producer = Producer(state)
    _index(state)
    producer.add(_header(), _user("u1", 1), _assistant("a1", 2))
    journal = Path(f"{producer.path}-journal")
    os.mkfifo(journal)
    out = subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--format", "oc-transcript", str(state)],
                         env=cli_env(db), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"transcript store {producer.path} cannot be read" in out.stderr
    journal.unlink()
    assert ingest(db, state, fmt="oc-transcript").lines == 3


def test_an_entry_in_both_copies_is_one_event_whichever_is_read_first(tmp_path):
    # The JSONL copy serializes entries its own way; the store has one entry more, the file one entry less.
    jsonl = [_header(), _user("u1", 1), _assistant("a1", 2), _user("u2", 3)]
    store = [_header(), _user("u1", 1), _assistant("a1", 2), _user("u2", 3), _assistant("a2", 4)]
    totals = []
    for order in ("store first", "file first"):
        state = tmp_path / order / "state"
        db = tmp_path / order / "ledger.db"
        producer = Producer(state)
        _index(state)
        transcript = state / "agents" / "main" / "sessions" / f"{SID}.jsonl"
        transcript.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in jsonl))
        if order == "file first":
            ingest(db, state, fmt="oc-transcript")
        producer.add(*store)
        ingest(db, state, fmt="oc-transcript")
        assert ingest(db, state, fmt="oc-transcript").events == 0
        totals.append(rows(db, "SELECT llm_calls, runs, input_tokens, cost_pico FROM session_totals"))
        assert scalar(db, "SELECT count(*) FROM events WHERE kind = 'session.start'") == 1
        _clean(db)
    assert totals[0] == totals[1] == [(2, 2, 10, 2 * 10**10)]


@pytest.mark.parametrize("order", ["store first", "file first"])
def test_an_entry_without_an_id_in_both_copies_is_one_event_however_each_serializes_it(tmp_path, order):
    # Known by its bytes alone, the file's line and the store's row of it were two model calls.
    entries = [_header(), _user("u1", 1), _assistant("", 2, cost=0.002) | {"id": None}, _user("u2", 3)]
    state, db = tmp_path / "state", tmp_path / "ledger.db"
    producer = Producer(state)  # its rows' keys sorted, the file's as written, and spaced as Python writes JSON
    _index(state)
    transcript = state / "agents" / "main" / "sessions" / f"{SID}.jsonl"
    transcript.write_text("".join(json.dumps(e) + "\n" for e in entries))
    if order == "file first":
        ingest(db, state, fmt="oc-transcript")
    producer.add(*entries)
    ingest(db, state, fmt="oc-transcript")
    assert ingest(db, state, fmt="oc-transcript").events == 0
    assert rows(db, "SELECT llm_calls, runs, cost_pico FROM session_totals") == [(1, 2, 2 * 10**9)]
    _clean(db)


@pytest.mark.parametrize("order", ["store first", "file first"])
def test_entries_holding_half_a_surrogate_pair_in_both_copies_are_indexed_once(tmp_path, order):
    # Half a pair cut from a string, escaped alone as JS writes it: the row and the line were each rejected.
    cut = {"errorMessage": "party \ud83c"}
    entries = [_header(), _user("u1", 1) | cut, _assistant("", 2, cost=0.002) | {"id": None} | cut, _user("u2", 3)]
    state, db = tmp_path / "state", tmp_path / "ledger.db"
    producer = Producer(state)
    _index(state)
    transcript = state / "agents" / "main" / "sessions" / f"{SID}.jsonl"
    transcript.write_text("".join(json.dumps(e) + "\n" for e in entries))
    if order == "file first":
        ingest(db, state, fmt="oc-transcript")
    producer.add(*(json.dumps(e, sort_keys=True, separators=(",", ":")) for e in entries))
    ingest(db, state, fmt="oc-transcript")
    assert ingest(db, state, fmt="oc-transcript").events == 0
    assert rows(db, "SELECT llm_calls, runs, cost_pico FROM session_totals") == [(1, 2, 2 * 10**9)]
    assert scalar(db, "SELECT count(*) FROM rejects") == 0
    _clean(db)


def test_a_bad_row_is_one_reject_and_the_store_is_never_written(tmp_path, db):
    state = tmp_path / "state"
    producer = Producer(state)
    _index(state)
    producer.add(_header(), _user("u1", 1), '{"type": "message", "id": "x"', None, _assistant("a1", 2))
    producer.conn.close()
    before = hashlib.sha256(producer.path.read_bytes()).digest()
    stats = ingest(db, state, fmt="oc-transcript")
    assert (stats.lines, stats.rejects) == (5, 2)
    assert rows(db, "SELECT path, offset FROM rejects ORDER BY offset") == [
        (f"{producer.path}#{SID}", 2), (f"{producer.path}#{SID}", 3)]
    assert scalar(db, "SELECT count(*) FROM llm_calls") == 1
    assert hashlib.sha256(producer.path.read_bytes()).digest() == before
    assert sorted(p.name for p in producer.path.parent.iterdir()) == ["openclaw-agent.sqlite"]


def test_where_both_copies_are_there_the_store_row_is_the_one_indexed(tmp_path, db):
    state = tmp_path / "state"
    producer = Producer(state)
    _index(state)
    (state / "agents" / "main" / "sessions" / f"{SID}.jsonl").write_bytes(
        b"".join(orjson.dumps(e) + b"\n" for e in (_header(), _user("u1", 1), _assistant("a1", 2, cost=0.01))))
    producer.add(_header(), _user("u1", 1), _assistant("a1", 2, cost=0.03))
    stats = ingest(db, state, fmt="oc-transcript")
    assert (stats.lines, stats.events, stats.duplicates) == (6, 4, 4)
    assert scalar(db, "SELECT cost_pico FROM llm_calls") == 3 * 10**10


def _figures(db: Path) -> tuple[list, list]:
    """What the ledger shows of the session: its totals, and its model calls in its timeline."""
    conn = open_reader(db)
    try:
        assert check_rollups(conn) == []
    finally:
        conn.close()
    totals = [(r["session_key"], r["llm_calls"], r["total_tokens"], r["cost_usd"]) for r in cli_json(db, "sessions")]
    return totals, [(i["what"], i["cost_usd"]) for i in cli_json(db, "timeline", SID) if i["kind"] == "llm"]


@pytest.mark.parametrize(("store_in", "store_cost"), [(5193, 0.5), (93, 0.001)],
                         ids=["store-says-more", "store-says-less"])
def test_a_store_that_appears_after_its_jsonl_copy_was_indexed_wins_as_in_a_fresh_read(tmp_path, store_in, store_cost):
    # An OpenClaw upgrade migrates the history it had in JSONL into its store: the same entries, the store's
    # figures for a1, and a2 only in the store.
    state = tmp_path / "state"
    (state / "agents" / "main" / "sessions").mkdir(parents=True)
    _index(state)
    (state / "agents" / "main" / "sessions" / f"{SID}.jsonl").write_bytes(
        b"".join(orjson.dumps(e) + b"\n" for e in (_header(), _user("u1", 1), _assistant("a1", 2, cost=0.006,
                                                                                        tokens_in=1193))))
    followed, afresh = tmp_path / "followed.db", tmp_path / "afresh.db"
    ingest(followed, state, fmt="oc-transcript")
    Producer(state).add(_header(), _user("u1", 1), _assistant("a1", 2, cost=store_cost, tokens_in=store_in),
                        _user("u2", 3), _assistant("a2", 4))
    ingest(followed, state, fmt="oc-transcript")
    assert ingest(followed, state, fmt="oc-transcript").events == 0
    ingest(afresh, state, fmt="oc-transcript")
    want = ([("agent:main:main", 2, store_in + 7 + 12, round(store_cost + 0.01, 6))],
            [(f"claude-sonnet-4-5 {store_in + 7} tokens", store_cost), ("claude-sonnet-4-5 12 tokens", 0.01)])
    assert _figures(followed) == _figures(afresh) == want
    assert metric_counters(followed) == metric_counters(afresh)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.integers(1, 4)), min_size=1, max_size=6),
       bad=st.sets(st.integers(0, 30), max_size=3))
def test_every_row_is_indexed_exactly_once_however_appends_and_runs_interleave(tmp_path_factory, steps, bad):
    """Each step: the producer appends some rows (a call each, to one of two sessions), then maybe a new
    process reads, a few rows per page; a last read follows. Every row ends up indexed once."""
    base = tmp_path_factory.mktemp("store")
    state, db = base / "state", base / "ledger.db"
    producer = Producer(state)
    _index(state)
    calls = 0
    sessions = (SID, "3c9d7e1a-0000-4000-8000-000000000002")
    for step, (appended, read, page) in enumerate(steps):
        for i in range(appended):
            n = producer.seq
            if n in bad:
                producer.add("{not json", session=sessions[n % 2])
            else:
                producer.add(_assistant(f"a{n}", step), session=sessions[n % 2])
                calls += 1
        if read:
            conn = open_writer(db)
            try:
                pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
                pipeline.tailers[0][2].page_rows = page
                pipeline.catch_up()
            finally:
                conn.close()
    ingest(db, state, fmt="oc-transcript")
    if producer.seq == 0:
        return
    assert scalar(db, "SELECT sum(lines) FROM files") == producer.seq
    assert scalar(db, "SELECT count(*) FROM llm_calls") == calls
    assert scalar(db, "SELECT count(*) FROM rejects") == producer.seq - calls
    _clean(db)


@pytest.mark.parametrize("reset", ["rows-read-after-it", "nothing-left-to-read", "index-written-last"])
def test_a_reset_session_only_in_the_store_has_the_same_key_followed_live_as_read_afresh(tmp_path, monkeypatch,
                                                                                         reset):
    monkeypatch.setattr(transcript_store, "_QUIET_NS", 0)  # a store read once is not looked at again unchanged
    new = "3c9d7e1a-0000-4000-8000-0000000000f0"
    state = tmp_path / "state"
    producer = Producer(state)
    _index(state)
    producer.add(_header(), _user("u1", 1), _assistant("a1", 2, cost=0.5),
                 _entry("compaction", "k1", 2, summary="so far", firstKeptEntryId="a1", tokensBefore=5000))
    with followed_then_afresh(tmp_path, state) as ledgers:
        ledgers.pipeline.run_once()
        if reset == "rows-read-after-it":  # written just before the reset
            producer.add(_user("u2", 3), _assistant("a2", 4, cost=0.25))
        # A reset: the key names a new session, and the old one is no longer listed.
        if reset != "index-written-last":
            _index(state, session=new)
        producer.add(_header(10) | {"id": new}, _user("u1", 10), _assistant("a1", 11, cost=1.0), session=new)
        ledgers.pipeline.catch_up()
        if reset == "index-written-last":  # the new session's rows were read before the index named it
            _index(state, session=new)
            ledgers.pipeline.catch_up()
    got = keys_seen(ledgers.followed, SID)
    assert got[0] == [(f"agent:main:{SID}", SID, 0.75 if reset == "rows-read-after-it" else 0.5),
                      ("agent:main:main", new, 1.0)]
    assert got[1][1]["compactions"] != []
    assert got == keys_seen(ledgers.afresh, SID)


def test_a_write_to_sessions_json_looks_again_only_at_the_sessions_whose_entry_changed(tmp_path, db, monkeypatch):
    # Every sessions.json write lists the store again; each of its sessions was decoded and its key asked
    # of the ledger, one statement each, so a turn cost time per session ever stored.
    monkeypatch.setattr(transcript_store, "_QUIET_NS", 0)
    state = tmp_path / "state"
    producer = Producer(state)
    others = [f"3c9d7e1a-0000-4000-8000-{n:012x}" for n in range(2, 42)]
    for sid in (SID, *others):
        producer.add(_header() | {"id": sid}, _user("u1", 1), _assistant("a1", 2), session=sid)
    index = state / "agents" / "main" / "sessions" / "sessions.json"
    main = {"agent:main:main": {"sessionId": SID, "updatedAt": 1}}
    index.write_bytes(orjson.dumps(main))
    ingest(db, state, fmt="oc-transcript")
    conn = open_writer(db)
    try:
        asked: list[str] = []
        conn.set_profile(lambda sql, _ns: asked.append(sql) if "FROM sessions" in sql else None)
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        pipeline.catch_up()  # a restart: every session is looked at once, all in one statement
        assert len(asked) == 1
        asked.clear()
        index.write_bytes(orjson.dumps({"agent:main:main": {"sessionId": SID, "updatedAt": 1000}}))
        pipeline.run_once()
        assert asked == []
        index.write_bytes(orjson.dumps(main | {"agent:main:subagent:abc": {"sessionId": others[0],
                                                                             "spawnedBy": "agent:main:main"}}))
        pipeline.run_once()
    finally:
        conn.close()
    assert rows(db, "SELECT session_key FROM sessions WHERE session_id IN (?, ?) ORDER BY session_key",
                       (SID, others[0])) == [("agent:main:main",), ("agent:main:subagent:abc",)]


@pytest.mark.parametrize("copy", ["store", "file"])
def test_a_subagent_sessions_json_forgets_keeps_its_key_and_its_cost_under_its_parent(tmp_path, db, monkeypatch,
                                                                                      copy):
    # Once sessions.json no longer listed it, the key guessed for it (agent:main:<id>) replaced the one it was
    # listed under: its parent's family lost its cost, and the subagent showed $0.
    monkeypatch.setattr(transcript_store, "_QUIET_NS", 0)
    child, handed, heir = (f"3c9d7e1a-0000-4000-8000-0000000000c{n}" for n in "123")
    state = tmp_path / "state"
    producer = Producer(state)
    sessions = state / "agents" / "main" / "sessions"

    def write(session: str, start: int, cost: float) -> None:
        entries = (_header(start) | {"id": session}, _user("u1", start + 1), _assistant("a1", start + 2, cost=cost))
        if copy == "store":
            producer.add(*entries, session=session)
        else:
            (sessions / f"{session}.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries))

    def listing(**subagents: str) -> None:
        index = {"agent:main:main": {"sessionId": SID}}
        for name, session in subagents.items():
            index[f"agent:main:subagent:{name}"] = {"sessionId": session, "spawnedBy": "agent:main:main"}
        (sessions / "sessions.json").write_bytes(orjson.dumps(index))

    listing(abc=child, de=handed)
    write(SID, 0, 0.5)
    write(child, 3, 2.0)
    write(handed, 6, 1.0)
    conn = open_writer(db)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        pipeline.catch_up()
        listing()  # both ended and left the index, keeping their keys
        pipeline.catch_up()
        # de now names another session, as a reset would.
        listing(de=heir)
        write(heir, 9, 0.25)
        pipeline.catch_up()
        detail = queries.session_detail(conn, "agent:main:main")
    finally:
        conn.close()
    assert sorted(rows(db, "SELECT session_id, session_key FROM sessions")) == [
        (SID, "agent:main:main"), (child, "agent:main:subagent:abc"), (handed, f"agent:main:{handed}"),
        (heir, "agent:main:subagent:de")]
    assert detail["family_cost_usd"] == 2.75
    assert sorted((s["child_session_key"], s["cost_usd"]) for s in detail["subagents"]) == [
        ("agent:main:subagent:abc", 2.0), ("agent:main:subagent:de", 0.25)]


def _spawned(key: str) -> tuple[dict, dict]:
    """A sessions_spawn call and its answer naming the child ``key``."""
    call = _entry("message", "a1", 2, message={
        "role": "assistant", "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "toolUse",
        "content": [{"type": "toolCall", "id": "call_1", "name": "sessions_spawn", "arguments": {"task": "Review"}}],
        "usage": {"input": 5, "output": 7, "cost": {"total": 0.01}}})
    body = orjson.dumps({"status": "accepted", "childSessionKey": key}).decode()
    answer = _entry("message", "t1", 3, message={"role": "toolResult", "toolCallId": "call_1",
                                                  "toolName": "sessions_spawn", "isError": False,
                                                  "content": [{"type": "text", "text": body}]})
    return call, answer


@pytest.mark.parametrize("first", ["parent", "child"])
def test_a_subagent_only_in_the_store_ends_with_its_childs_run_whichever_session_is_read_first(tmp_path, db,
                                                                                                first):
    child, key = "3c9d7e1a-0000-4000-8000-0000000000c1", "agent:main:subagent:abc"
    state = tmp_path / "state"
    producer = Producer(state)
    (state / "agents" / "main" / "sessions" / "sessions.json").write_bytes(orjson.dumps({
        "agent:main:main": {"sessionId": SID}, key: {"sessionId": child, "spawnedBy": "agent:main:main"}}))
    stored = {"parent": (SID, (_header(), _user("u1", 1), *_spawned(key), _assistant("a2", 4))),
            "child": (child, (_header(2) | {"id": child}, _user("c1", 3), _assistant("c2", 9)))}
    for name in sorted(stored, key=lambda name: name != first):  # each read by a process of its own
        session, entries = stored[name]
        producer.add(*entries, session=session)
        ingest(db, state, fmt="oc-transcript")
    settle(db)
    assert _subagent_end(db, key) == ([("ended", "ok", 1790841609000)], [("ended", "subagent")])
    assert rows(db, "SELECT parent_session_key FROM subagents") == [("agent:main:main",)]
    _clean(db)


def test_an_archived_subagent_only_in_the_store_is_found_by_its_parents_spawn_row(tmp_path, db, monkeypatch):
    # The spawns that name an archive's key were looked for in JSONL files alone: kept only in the store, the
    # subagent became a session of its own and its spend left its parent.
    child, key = "3c9d7e1a-0000-4000-8000-0000000000c1", "agent:main:subagent:abc"
    state = tmp_path / "state"
    producer = Producer(state)
    _index(state)  # the child ended and left sessions.json
    producer.add(_header(), _user("u1", 1), *_spawned(key), _assistant("a2", 4))
    producer.add(_header(2) | {"id": child}, _entry("message", "c1", 3, message={"role": "user", "content": "Review"}),
                 _assistant("c2", 9, cost=0.5), session=child)
    scans = []
    monkeypatch.setattr(oc_store, "rows_naming", lambda *args: scans.append(args) or rows_naming(*args))
    conn = open_writer(db)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        pipeline.catch_up()
        pipeline.catch_up()
        detail = queries.session_detail(conn, "agent:main:main")
    finally:
        conn.close()
    assert sorted(rows(db, "SELECT session_id, session_key FROM sessions")) == [(SID, "agent:main:main"), (child, key)]
    assert detail["family_cost_usd"] == 0.52
    assert [(s["child_session_key"], s["cost_usd"]) for s in detail["subagents"]] == [(key, 0.5)]
    assert len(scans) == 1  # the store's rows are scanned for spawns once, not again while it is unchanged
    _clean(db)


@pytest.mark.parametrize("first", ["parent", "child"])
def test_a_subagents_spawn_row_from_the_store_holds_what_its_parent_and_its_child_said(tmp_path, db, first):
    """The store's rows of the spawning session and of its child give the subagent row their files give."""
    state = tmp_path / "state"
    producer = Producer(state)
    write_spawn_index(state / "agents" / "main" / "sessions")
    lines = spawn_transcripts()
    order = [SPAWNER, SPAWNED] if first == "parent" else [SPAWNED, SPAWNER]
    for session in order:  # each read by a process of its own
        producer.add(*(line.decode().strip() for line in lines[session]), session=session)
        ingest(db, state, fmt="oc-transcript")
    assert spawn_row(db) == [SPAWN_ROW]
    _clean(db)


def test_a_pass_over_unchanged_transcripts_asks_the_ledger_nothing_and_still_follows_a_new_key(tmp_path, db):
    # Every full pass (every rescan_s) built a decoder and ran a key query for each transcript, read or not.
    sessions = tmp_path / "state" / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    ids = [f"3c9d7e1a-0000-4000-8000-{i:012x}" for i in range(1, 31)]
    index = {f"agent:main:chat:{i}": {"sessionId": sid} for i, sid in enumerate(ids[:10])}
    (sessions / "sessions.json").write_bytes(orjson.dumps(index))
    for i, sid in enumerate(ids):  # listed, then live ones sessions.json forgot, then reset archives
        name = f"{sid}.jsonl" if i < 20 else f"{sid}.jsonl.reset.2026-10-01T09-00-00.000Z"
        (sessions / name).write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in (
            _header() | {"id": sid}, _user("u1", 1), _assistant("a1", 2))))
    conn = open_writer(db)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [sessions.parents[2]]))
        assert pipeline.catch_up().lines == 90
        asked = []
        conn.set_profile(lambda sql, ns: asked.append(sql))
        assert pipeline.run_once().lines == 0
        assert asked == []
        # sessions.json gives one of them another key: followed though its transcript did not change.
        index["agent:main:chat:renamed-3"] = index.pop("agent:main:chat:3")
        (sessions / "sessions.json").write_bytes(orjson.dumps(index))
        os.utime(sessions / "sessions.json", ns=(10**18, 10**18))
        pipeline.run_once()
        conn.set_profile(None)
    finally:
        conn.close()
    followed = sorted(rows(db, "SELECT session_id, session_key FROM sessions"))
    assert dict(followed)[ids[3]] == "agent:main:chat:renamed-3"
    fresh = db.with_name("fresh.db")
    ingest(fresh, sessions.parents[2], fmt="oc-transcript")
    assert followed == sorted(rows(fresh, "SELECT session_id, session_key FROM sessions"))


def _one_transcript(sessions: Path) -> None:
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / f"{SID}.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in (
        _header(), _user("u1", 1), _assistant("a1", 2))))


def _list_as(sessions: Path, key: str, tick: list[int]) -> None:
    (sessions / "sessions.json").write_bytes(orjson.dumps({key: {"sessionId": SID}}))
    tick[0] += 10**9
    os.utime(sessions / "sessions.json", ns=(tick[0], tick[0]))


def test_a_settled_transcript_moved_to_another_agent_is_keyed_as_that_agents(tmp_path, db):
    # A rename keeps the file's row: what its key was settled with must name the path, which gives the agent.
    state = tmp_path / "state"
    _one_transcript(state / "agents" / "main" / "sessions")
    (state / "agents" / "work" / "sessions").mkdir(parents=True)
    conn = open_writer(db)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        pipeline.run_once()
        pipeline.run_once()
        os.rename(state / "agents" / "main" / "sessions" / f"{SID}.jsonl",
                  state / "agents" / "work" / "sessions" / f"{SID}.jsonl")
        pipeline.run_once()
    finally:
        conn.close()
    assert scalar(db, "SELECT session_key FROM sessions") == f"agent:work:{SID}"


def test_a_sessions_json_written_during_a_pass_never_leaves_a_stale_key_settled(tmp_path, db):
    # The pass looked at the folder, then the gateway wrote sessions.json before the decoder read it: the
    # key was settled with what the pass saw but checked against what the decoder saw, and when the
    # listing came back to what the pass saw, the ledger kept the other key for good.
    sessions, tick = tmp_path / "state" / "agents" / "main" / "sessions", [1_900_000_000 * 10**9]
    _one_transcript(sessions)
    _list_as(sessions, "agent:main:chat:2", tick)
    conn = open_writer(db)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [sessions.parents[2]]))
        pipeline.run_once()
        pipeline.run_once()
        _list_as(sessions, "agent:main:chat:1", tick)
        tailer, opener, *rest = pipeline.tailers[0]

        def racing(path, lookup):
            _list_as(sessions, "agent:main:chat:2", tick)
            return opener(path, lookup)

        pipeline.tailers[0] = (tailer, racing, *rest)
        pipeline.run_once()
        pipeline.tailers[0] = (tailer, opener, *rest)
        _list_as(sessions, "agent:main:chat:1", tick)
        for _ in range(2):
            pipeline.run_once()
    finally:
        conn.close()
    assert scalar(db, "SELECT session_key FROM sessions") == "agent:main:chat:1"


def test_transcripts_under_names_that_are_not_utf8_are_keyed_by_the_sessions_json_beside_them(tmp_path, db):
    # Decoders were given the name the ledger writes (\xNN for such a byte), under which there is no
    # sessions.json to find: every session got a key guessed from its id.
    agent = os.fsdecode(b"m\xe4in")
    sessions = tmp_path / os.fsdecode(b"st\xffate") / "agents" / agent / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_bytes(orjson.dumps({"agent:main:telegram:1": {"sessionId": SID}}))
    (sessions / f"{SID}.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in (
        _header(), _user("u1", 1), _assistant("a1", 2, cost=0.5))))
    assert ingest(db, sessions.parents[2], fmt="oc-transcript").lines == 3
    # The agent is named as the ledger writes names, which SQLite can hold.
    assert rows(db, "SELECT session_id, session_key, agent_id FROM sessions") == [
        (SID, "agent:main:telegram:1", "m\\xe4in")]
    assert scalar(db, "SELECT sum(cost_pico) FROM llm_calls") == 5 * 10**11


@pytest.mark.parametrize("name", [b"caf\xe9-state", b"state?mode=rw#1%41"])
def test_a_store_is_read_with_the_files_beside_it_whatever_its_root_is_named(tmp_path, db, name):
    # The store's name went into its URI as text, which cannot hold such a name: ingest stopped, before the files.
    # A name holding what a URI gives a meaning to is the store's name all the same.
    plain, state = tmp_path / "plain", tmp_path / os.fsdecode(name)
    producer = Producer(plain)
    _index(plain)
    producer.add(_header(), _user("u1", 1), _assistant("a1", 2, cost=0.5))
    producer.conn.close()
    other = "3c9d7e1a-0000-4000-8000-0000000000a2"
    (plain / "agents" / "main" / "sessions" / f"{other}.jsonl").write_bytes(b"".join(
        orjson.dumps(e) + b"\n" for e in (_header(3) | {"id": other}, _user("u1", 4), _assistant("a1", 5, cost=1.0))))
    plain.rename(state)
    assert ingest(db, state, fmt="oc-transcript").lines == 6
    assert ingest(db, state, fmt="oc-transcript").lines == 0  # each known again by the name it was recorded under
    assert scalar(db, "SELECT sum(cost_pico) FROM llm_calls") == 15 * 10**11
    # Keyed by the sessions.json beside them, not guessed from their ids: their decoders looked for it
    # under the name the ledger writes, which is no directory when the root's name is not UTF-8.
    assert sorted(rows(db, "SELECT session_id, session_key FROM sessions")) == sorted(
        [(SID, "agent:main:main"), (other, f"agent:main:{other}")])
    named = str(tmp_path / name.decode("utf-8", "backslashreplace"))
    assert sorted(rows(db, "SELECT source, root, path FROM files")) == [
        ("oc-transcript", named, f"{named}/agents/main/sessions/{other}.jsonl"),
        ("oc-transcript-sqlite", named, f"{named}/agents/main/agent/openclaw-agent.sqlite#{SID}")]


def test_a_sessions_json_replaced_at_the_same_size_and_time_is_read_again(tmp_path):
    # Written whole and renamed into place within one mtime tick, at the same size: the old entries stayed.
    from agentledger.sources import oc_transcript

    index = tmp_path / "sessions.json"
    index.write_bytes(orjson.dumps({"agent:main:aaaa": {"sessionId": SID}}))
    assert oc_transcript.index(str(tmp_path))[SID]["key"] == "agent:main:aaaa"
    st = index.stat()
    (tmp_path / "next.json").write_bytes(orjson.dumps({"agent:main:bbbb": {"sessionId": SID}}))
    os.utime(tmp_path / "next.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp_path / "next.json", index)
    assert oc_transcript.index(str(tmp_path))[SID]["key"] == "agent:main:bbbb"


def test_a_sessions_json_cut_short_keeps_its_last_listing_and_is_read_once_until_rewritten(tmp_path, monkeypatch):
    from agentledger.sources import oc_transcript

    index = tmp_path / "sessions.json"
    index.write_bytes(orjson.dumps({"agent:main:aaaa": {"sessionId": SID}}))
    assert oc_transcript.index(str(tmp_path))[SID]["key"] == "agent:main:aaaa"
    index.write_bytes(b'{"agent:main:bbbb": {"sessionId": "')
    reads = []
    monkeypatch.setattr(oc_transcript, "read_regular", lambda path: reads.append(path) or index.read_bytes())
    for _ in range(3):
        assert oc_transcript.index(str(tmp_path))[SID]["key"] == "agent:main:aaaa"
        assert oc_transcript.unread_indexes() == {str(index): "not a JSON object: unexpected end of data"}
    assert reads == [str(index)]
    index.write_bytes(orjson.dumps({"agent:main:bbbb": {"sessionId": SID}}))
    assert oc_transcript.index(str(tmp_path))[SID]["key"] == "agent:main:bbbb"
    assert str(index) not in oc_transcript.unread_indexes()


def test_a_store_that_cannot_be_opened_is_told_not_skipped_silently(tmp_path, db, unprivileged):
    import subprocess
    import sys

    from conftest import REPO, cli_env

    state = tmp_path / "state"
    producer = Producer(state)
    _index(state)
    producer.add(_header(), _user("u1", 1), _assistant("a1", 2))
    producer.conn.close()
    producer.path.chmod(0)
    try:
        out = subprocess.run([*unprivileged, sys.executable, "-m", "agentledger", "--db", str(db), "ingest",
                              "--format", "oc-transcript", str(state)], capture_output=True, text=True,
                             env=cli_env(db), cwd=REPO, timeout=120)
    finally:
        producer.path.chmod(0o644)
    assert out.returncode == 0, out.stderr
    assert f"transcript store {producer.path} cannot be read" in out.stderr


def test_a_rekey_whose_rows_cannot_be_read_again_waits_for_a_pass_that_can(tmp_path, monkeypatch):
    """The key and what the rows read under the old one yield under it commit together: a store held by its
    producer past the busy wait leaves both for a later pass, never the key alone."""
    child, key = "3c9d7e1a-0000-4000-8000-0000000000c1", "agent:main:subagent:abc"
    state = tmp_path / "state"
    producer = Producer(state)
    _index(state)
    producer.add(_header(), _user("u1", 1), *_spawned(key), _assistant("a2", 4))
    producer.add(_header(2) | {"id": child}, _user("c1", 3), _assistant("c2", 9), session=child)
    stepwise, fresh = tmp_path / "stepwise.db", tmp_path / "fresh.db"
    ingest(stepwise, state, fmt="oc-transcript")
    (state / "agents" / "main" / "sessions" / "sessions.json").write_bytes(orjson.dumps({
        "agent:main:main": {"sessionId": SID}, key: {"sessionId": child, "spawnedBy": "agent:main:main",
                                                     "label": "review"}}))
    real = transcript_store.StoreReader.read_back

    def busy(self, path, max_line):
        raise ReadBackFailed("database is locked")
        yield

    # One daemon's passes: the pass after the failed one names the session as due its key again, though
    # nothing in the store changed.
    conn = open_writer(stepwise)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        monkeypatch.setattr(transcript_store.StoreReader, "read_back", busy)
        pipeline.run_once()
        assert rows(stepwise, f"SELECT count(*) FROM sessions WHERE session_key = '{key}'") == [(0,)]
        monkeypatch.setattr(transcript_store.StoreReader, "read_back", real)
        pipeline.run_once()  # the producer is quiet again
    finally:
        conn.close()
    ingest(fresh, state, fmt="oc-transcript")
    for db in (stepwise, fresh):
        settle(db)
    assert _subagent_end(stepwise, key) == _subagent_end(fresh, key) == (
        [("ended", "ok", 1790841609000)], [("ended", "subagent")])


def test_a_subagent_only_in_the_store_read_before_sessions_json_named_it_ends_as_a_fresh_read_does(tmp_path):
    # Its rows read under the key guessed for it, which is no subagent's, gave no subagent end and no spawn of
    # its own; named as a subagent later, it was rekeyed and those rows were not decoded again.
    child, key = "3c9d7e1a-0000-4000-8000-0000000000c1", "agent:main:subagent:abc"
    state = tmp_path / "state"
    producer = Producer(state)
    sessions = state / "agents" / "main" / "sessions"
    _index(state)
    producer.add(_header(), _user("u1", 1), *_spawned(key), _assistant("a2", 4))
    producer.add(_header(2) | {"id": child}, _user("c1", 3), _assistant("c2", 9), session=child)
    stepwise, fresh = tmp_path / "stepwise.db", tmp_path / "fresh.db"
    first = ingest(stepwise, state, fmt="oc-transcript")
    (sessions / "sessions.json").write_bytes(orjson.dumps({
        "agent:main:main": {"sessionId": SID}, key: {"sessionId": child, "spawnedBy": "agent:main:main",
                                                     "label": "review"}}))
    second = ingest(stepwise, state, fmt="oc-transcript")
    whole = ingest(fresh, state, fmt="oc-transcript")
    for db in (stepwise, fresh):
        settle(db)
    assert _subagent_end(stepwise, key) == _subagent_end(fresh, key) == (
        [("ended", "ok", 1790841609000)], [("ended", "subagent")])
    assert (second.lines, second.duplicates) == (0, 0)
    assert first.events + second.events == whole.events
    for sql in ("SELECT count(*) FROM events", "SELECT * FROM subagents", "SELECT sum(offset) FROM files",
                "SELECT session_key, session_id, status, ended_ms, end_reason FROM sessions ORDER BY session_id"):
        assert rows(stepwise, sql) == rows(fresh, sql), sql
    _clean(stepwise)


def test_a_daemon_following_a_store_remembers_only_the_sessions_its_last_pass_named(tmp_path):
    # Every session ever named as due a key stayed in memory for the daemon's life, one more with each new
    # session: what a pass names is keyed before that pass ends, and is never asked for again.
    state = tmp_path / "state"
    producer = Producer(state)
    sessions = state / "agents" / "main" / "sessions"
    listed = {"agent:main:main": {"sessionId": SID}}
    _index(state)
    producer.add(_header(), _user("u1", 1), _assistant("a1", 2))
    stepwise, fresh = tmp_path / "stepwise.db", tmp_path / "fresh.db"
    children: list[str] = []
    conn = open_writer(stepwise)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        for n in range(6):
            # A pass's children are read under the keys guessed for them, and named as subagents on the next
            # pass: keyed then, their rows read again.
            for child in children:
                listed[f"agent:main:subagent:{child[-4:]}"] = {"sessionId": child, "spawnedBy": "agent:main:main"}
            (sessions / "sessions.json").write_bytes(orjson.dumps(listed))
            named_now = [str(sessions / f"{child}.jsonl") for child in children]
            children = [f"3c9d7e1a-0000-4000-8000-00000000{n}{i:03d}" for i in range(3)] if n < 5 else []
            for child in children:
                producer.add(_header(2) | {"id": child}, _user("c1", 3), _assistant("c2", 9), session=child)
            pipeline.run_once()
        assert sorted(pipeline.tailers[0][2].named) == named_now
    finally:
        conn.close()
    ingest(fresh, state, fmt="oc-transcript")
    for db in (stepwise, fresh):
        settle(db)
    sql = "SELECT session_key, session_id, status, ended_ms, end_reason FROM sessions ORDER BY session_id"
    assert rows(stepwise, sql) == rows(fresh, sql)
    assert scalar(stepwise, "SELECT count(*) FROM sessions WHERE session_key LIKE 'agent:main:subagent:%'") == 15
    for sql in ("SELECT count(*) FROM events", "SELECT * FROM subagents"):
        assert rows(stepwise, sql) == rows(fresh, sql), sql
    _clean(stepwise)


_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(alphabet='id"{}[]\\:, x', max_size=8),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["id", "x", "{"]),
                                                                                   inner, max_size=3), max_leaves=6)


@given(entry=st.dictionaries(st.sampled_from(["id", "type", "x", 'i"d', "[", "{"]), _VALUES, max_size=4),
       spaced=st.booleans())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_a_row_is_told_to_have_no_id_of_its_own_exactly_when_its_entry_has_none(entry, spaced):
    # Rows whose id leads are known without parsing them; the answer must be the parse's whatever the row holds.
    from agentledger.tail.transcript_store import _idless

    row = json.dumps(entry).encode() if spaced else orjson.dumps(entry)
    has_id = isinstance(entry.get("id"), str) and entry["id"] != ""
    assert (_idless(row) is None) == has_id, row


def test_a_store_only_session_without_its_first_message_is_looked_for_again_only_once_the_store_changed(
        tmp_path, monkeypatch):
    # A head not found yet was not remembered: every pass opened the store again for each such session.
    from agentledger.sources import oc_transcript

    state = tmp_path / "state"
    producer = Producer(state)
    producer.add(_header())  # no user message yet
    path = str(state / "agents" / "main" / "sessions" / f"{SID}.jsonl")  # names no file: the store keeps it
    asked = []
    real = oc_store.first_rows
    monkeypatch.setattr(oc_store, "first_rows", lambda *args: asked.append(args) or real(*args))
    assert [oc_transcript._head(path) for _ in range(3)] == [None] * 3
    assert len(asked) == 1
    producer.add(_user("u1", 1))
    os.utime(producer.path, ns=(1, 1))  # the store changed, whatever its clock's grain
    assert oc_transcript._head(path) is not None and len(asked) == 2
