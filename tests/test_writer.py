"""The ledger writer: one transaction per batch (or per pass over several files), idempotent, and one bad
value costs one line."""

from __future__ import annotations

import os
import threading
import time

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledgerdump import dump, scalar, usage, verify
from logwriter import LogDir, event, llm_call
from serving import wait_for
from conftest import cli_json, ingest, settle

from agentledger.facts import LlmCall, Tokens, ToolEnded, ToolStarted
from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger import queries
from agentledger.ledger import writer as writer_module
from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.writer import Batch, CheckpointConflict, LedgerWriter


def _call(n: int, tokens: int = 1) -> LlmCall:
    return LlmCall(event_id=n, ts_ms=1_000 + n, kind="llm.call", source="oc-telemetry", session_id="s",
                   run_id="r", tokens=Tokens(input=tokens, total=tokens), cost_pico=5)


@pytest.fixture
def writer(db):
    conn = open_writer(db)
    w = LedgerWriter(conn)
    yield w
    conn.close()


def _file(writer: LedgerWriter, name: str = "events.jsonl") -> int:
    return writer.add_file("oc-telemetry", "/r", f"/r/{name}", name.encode(), 1, 2, 0, "live").id


def test_a_value_sqlite_refuses_becomes_a_reject_and_the_batch_still_lands(writer, db):
    fid = _file(writer)
    facts = [(0, 10, _call(1)), (10, 10, _call(2, tokens=2**70)), (20, 10, _call(3))]
    result = writer.apply(Batch(fid, "/r/events.jsonl", 0, 30, 3, 30, facts))
    assert (result.new_facts, result.rejects) == (2, 1)
    assert scalar(db, "SELECT count(*) FROM llm_calls") == 2
    assert scalar(db, "SELECT offset || ':' || length FROM rejects") == "10:10"
    assert scalar(db, "SELECT offset FROM files") == 30


def test_checkpoint_must_continue_where_the_file_was_left(writer, db):
    fid = _file(writer)
    writer.apply(Batch(fid, "/r/events.jsonl", 0, 10, 1, 10, [(0, 10, _call(1))]))
    with pytest.raises(CheckpointConflict):
        writer.apply(Batch(fid, "/r/events.jsonl", 0, 20, 2, 20, [(0, 10, _call(1)), (10, 10, _call(2))]))
    # The conflicting batch left nothing behind.
    assert scalar(db, "SELECT count(*) FROM llm_calls") == 1
    assert scalar(db, "SELECT offset FROM files") == 10


def test_same_event_twice_counts_once(writer, db):
    fid = _file(writer)
    writer.apply(Batch(fid, "/r/events.jsonl", 0, 20, 2, 20, [(0, 10, _call(1)), (10, 10, _call(1))]))
    writer.apply(Batch(fid, "/r/events.jsonl", 20, 30, 1, 30, [(20, 10, _call(1))]))
    assert scalar(db, "SELECT count(*) FROM llm_calls") == 1
    assert scalar(db, "SELECT sum(cost_pico) FROM llm_calls") == 5


def test_absurd_cost_and_tokens_do_not_stall_the_file(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    huge = llm_call(2).replace(b'"costUsd":1e-6', b'"costUsd":1e8').replace(b'"input":1', b'"input":9223372036854775807')
    assert huge != llm_call(2)
    logs.append(llm_call(1) + huge + llm_call(3))
    stats = ingest(db, logs.root)
    assert stats.events == 3
    # The absurd cost is not taken: the call is priced from its tokens instead, never counted at 1e8 USD.
    assert scalar(db, "SELECT count(*) FROM llm_calls WHERE cost_source = 'log'") == 2
    assert scalar(db, "SELECT max(cost_pico) FROM llm_calls") < 10**12
    assert scalar(db, "SELECT sum(input_tokens) FROM llm_calls") == 2


def test_a_start_read_after_its_end_keeps_what_the_end_said_it_does_not_say(writer, db):
    """The same lines in one batch or two: the row must not depend on where the batch ended."""
    from agentledger.facts import RunEnded, RunStarted

    fid = _file(writer)
    common = {"source": "oc-telemetry", "session_id": "S", "run_id": "R", "agent_id": "main"}
    end = RunEnded(event_id=1, ts_ms=2_000, kind="run.end", model="M", provider="p", **common)
    start = RunStarted(event_id=2, ts_ms=1_000, kind="run.start", origin_channel=None, **common)
    writer.apply(Batch(fid, "/r/events.jsonl", 0, 10, 1, 10, [(0, 10, end)]))
    writer.apply(Batch(fid, "/r/events.jsonl", 10, 20, 1, 20, [(10, 10, start)]))
    row = [scalar(db, f"SELECT {c} FROM runs") for c in ("model", "provider", "started_ms", "ended_ms")]
    assert row == ["M", "p", 1_000, 2_000]
    assert verify(db) == []


def test_the_dearest_calls_the_decoder_takes_sum_exactly_and_verify_reports(tmp_path, db):
    """Ten calls of a million dollars each used to overflow the sums into floats and crash verify."""
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(llm_call(n).replace(b'"costUsd":1e-6', b'"costUsd":1000')
                         .replace(b'"input":1', b'"input":1000000000') for n in range(1, 11)))
    ingest(db, logs.root)
    assert scalar(db, "SELECT typeof(cost_pico) FROM session_totals") == "integer"
    assert scalar(db, "SELECT cost_pico FROM session_totals") == 10 * 1000 * 10**12
    assert scalar(db, "SELECT input_tokens FROM session_totals") == 10 * 10**9
    assert verify(db) == []


_CHILD = "agent:main:subagent:c1"


def _apply_in_batches(writer: LedgerWriter, facts: list, cuts: set[int]) -> None:
    """``facts`` as lines of one file, applied in batches that end before each index in ``cuts``."""
    fid = _file(writer)
    batches, batch = [], []
    for i, fact in enumerate(facts):
        if i in cuts:
            batches.append(batch)
            batch = []
        batch.append((i, 1, fact))
    for items in [*batches, batch]:
        start = items[0][0]
        writer.apply(Batch(fid, "/r/events.jsonl", start, start + len(items), len(items), len(facts), items))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(3)), cuts=st.sets(st.integers(1, 2)))
def test_a_subagents_two_ends_merge_alike_whatever_their_order(tmp_path_factory, order, cuts):
    """subagent.end (the child's own, with the time it ended) wins over subagent.stop; the stop
    fills in what the end leaves out (its reason)."""
    from agentledger.facts import SubagentEnded, SubagentSpawned

    common = {"source": "oc-telemetry", "session_key": "agent:main:main", "session_id": "S", "run_id": "R"}
    facts = [
        SubagentSpawned(event_id=1, ts_ms=1_000, kind="subagent.spawn", child_session_key=_CHILD, **common),
        SubagentEnded(event_id=2, ts_ms=2_000, kind="subagent.stop", child_session_key=_CHILD, outcome="done",
                      reason="finished", duration_ms=900, **common),
        SubagentEnded(event_id=3, ts_ms=2_100, kind="subagent.end", child_session_key=_CHILD, outcome="ok",
                      ended_ms=1_950, duration_ms=950, model="m", **common),
    ]
    db = tmp_path_factory.mktemp("ends") / "l.db"
    conn = open_writer(db)
    try:
        _apply_in_batches(LedgerWriter(conn), [facts[n] for n in order], cuts)
        row = conn.execute("SELECT status, ended_ms, duration_ms, outcome, reason, model FROM subagents").fetchall()
    finally:
        conn.close()
    assert row == [("ended", 1_950, 950, "ok", "finished", "m")]
    assert verify(db) == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(range(4)), cuts=st.sets(st.integers(1, 3)))
def test_a_subagents_spawn_lines_merge_alike_whatever_their_order(tmp_path_factory, order, cuts):
    """Who spawned a subagent and when is the earliest line naming the parent's run; what it is, the child's
    own word before its parent's (the lesser of two alike); what a line leaves out never erases another's."""
    from agentledger.facts import SubagentEnded, SubagentSpawned

    def spawn(n: int, ts: int, run: str | None, **fields) -> SubagentSpawned:
        return SubagentSpawned(event_id=n, ts_ms=ts, kind="subagent.spawn", source="oc-transcript", run_id=run,
                               child_session_key=_CHILD, **fields)

    facts = [
        spawn(1, 1_000, "R", session_key="agent:main:main", child_agent_id="main", label="asked", mode="run"),
        spawn(2, 990, None, session_key="agent:main:main", child_agent_id="work", label="review", by_child=True),
        spawn(3, 1_500, "R2", session_key="agent:main:other", child_agent_id="main", label="later", mode="session"),
        SubagentEnded(event_id=4, ts_ms=2_000, kind="subagent.end", source="oc-transcript", run_id="C",
                      child_session_key=_CHILD, outcome="ok"),
    ]
    db = tmp_path_factory.mktemp("spawns") / "l.db"
    conn = open_writer(db)
    try:
        _apply_in_batches(LedgerWriter(conn), [facts[n] for n in order], cuts)
        row = conn.execute("SELECT parent_session_key, parent_run_id, spawned_ms, child_agent_id, label, mode, "
                           "status FROM subagents").fetchall()
    finally:
        conn.close()
    assert row == [("agent:main:main", "R", 1_000, "work", "review", "run", "ended")]
    assert verify(db) == []


def test_batches_of_several_files_commit_together_each_with_its_checkpoint(writer, db):
    a, b = _file(writer, "a.jsonl"), _file(writer, "b.jsonl")
    before = scalar(db, "SELECT seq FROM ledger_position")
    result = writer.apply_many([
        Batch(a, "/r/a.jsonl", 0, 20, 2, 20, [(0, 10, _call(1)), (10, 10, _call(2, tokens=2**70))]),
        Batch(b, "/r/b.jsonl", 0, 10, 1, 10, [(0, 10, _call(3))]),
    ])
    assert (result.new_facts, result.rejects, result.position) == (2, 1, before + 1)
    assert scalar(db, "SELECT seq FROM ledger_position") == before + 1
    assert scalar(db, "SELECT group_concat(offset, ',') FROM (SELECT offset FROM files ORDER BY id)") == "20,10"
    assert scalar(db, "SELECT path || ':' || offset FROM rejects") == "/r/a.jsonl:10"
    assert scalar(db, "SELECT count(*) FROM llm_calls") == 2


def test_a_checkpoint_conflict_in_one_file_leaves_none_of_the_pass_behind(writer, db):
    a, b = _file(writer, "a.jsonl"), _file(writer, "b.jsonl")
    with pytest.raises(CheckpointConflict):
        writer.apply_many([
            Batch(a, "/r/a.jsonl", 0, 10, 1, 10, [(0, 10, _call(1))]),
            Batch(b, "/r/b.jsonl", 5, 15, 1, 15, [(5, 10, _call(2))]),
        ])
    assert scalar(db, "SELECT count(*) FROM events") == 0
    assert scalar(db, "SELECT sum(offset) FROM files") == 0


def _agents(root, n: int) -> list[LogDir]:
    return [LogDir(root, agent=f"a{i}") for i in range(n)]


def test_a_pass_over_many_files_is_one_transaction_with_every_session_it_changed(tmp_path, db):
    files = _agents(tmp_path / "state", 12)
    for i, logs in enumerate(files):
        logs.append(llm_call(i + 1, session=f"s{i}") + llm_call(100 + i, session=f"s{i}"))
    conn = open_writer(db)
    commits = []
    pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-telemetry", [tmp_path / "state"]),
                        after_commit=commits.append)
    try:
        stats = pipeline.run_once()
        assert stats.lines == 24
        assert len(commits) == 1
        assert commits[0].sessions == {f"sid-s{i}" for i in range(12)}
        assert commits[0].position == queries.ledger_position(conn)
        assert scalar(db, "SELECT count(*) FROM files WHERE offset = size AND offset > 0") == 12
    finally:
        conn.close()


def test_a_backlog_commits_in_pieces_of_at_most_batch_lines(tmp_path, db):
    sizes = (4, 5, 6, 7, 8, 9, 25)
    n = 0
    for i, logs in enumerate(_agents(tmp_path / "state", len(sizes))):
        logs.append(b"".join(llm_call(n := n + 1, session=f"s{i}") for _ in range(sizes[i])))
    conn = open_writer(db)
    commits = []
    pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-telemetry", [tmp_path / "state"]), batch_lines=10,
                        after_commit=commits.append)
    try:
        stats = pipeline.catch_up()
        assert stats.events == n == sum(sizes)
        assert scalar(db, "SELECT count(*) FROM events") == n
        # Files that fit together share a commit, none goes past the budget, and a file longer than
        # the budget is read on in pieces of it.
        assert [r.new_facts for r in commits] == [9, 6, 7, 8, 9, 10, 10, 5]
    finally:
        conn.close()


def test_a_refused_value_in_a_pass_costs_its_line_and_the_other_files_land_whole(writer, db):
    a, b, c = _file(writer, "a.jsonl"), _file(writer, "b.jsonl"), _file(writer, "c.jsonl")
    result = writer.apply_many([
        Batch(a, "/r/a.jsonl", 0, 10, 1, 10, [(0, 10, _call(1))]),
        Batch(b, "/r/b.jsonl", 0, 20, 2, 20, [(0, 10, _call(2)), (10, 10, _call(3, tokens=2**70))]),
        Batch(c, "/r/c.jsonl", 0, 10, 1, 10, [(0, 10, _call(4))]),
    ])
    assert (result.new_facts, result.rejects) == (3, 1)
    assert scalar(db, "SELECT group_concat(offset, ',') FROM (SELECT offset FROM files ORDER BY id)") == "10,20,10"
    assert scalar(db, "SELECT path || ':' || offset FROM rejects") == "/r/b.jsonl:10"
    assert scalar(db, "SELECT sum(input_tokens) FROM llm_calls") == 3


def _commit_calls(writer: LedgerWriter, fid: int, i: int) -> None:
    """Batch ``i`` of a file: 100 priced calls over 40 sessions, in a transaction of its own."""
    n = i * 100
    facts = [(k * 10, 10, LlmCall(event_id=f"e{n + k}", ts_ms=1_000 + n + k, kind="llm.call",
                                  source="oc-telemetry", session_id=f"s{k % 40}", run_id=f"r{k % 40}",
                                  tokens=Tokens(input=1, total=1), cost_pico=5)) for k in range(100)]
    writer.apply(Batch(fid, "/r/events.jsonl", i * 1000, (i + 1) * 1000, 100, (i + 1) * 1000, facts))


def _wal_peak(tmp_path, name: str, wal_limit: int) -> int:
    """The WAL's largest size while batches commit and two readers keep a read open at all times."""
    db = tmp_path / f"{name}.db"
    conn = open_writer(db)
    writer = LedgerWriter(conn, wal_limit=wal_limit)
    stop = threading.Event()

    def read(delay: float) -> None:
        time.sleep(delay)
        reader = open_reader(db)
        try:
            while not stop.is_set():
                reader.execute("BEGIN")
                reader.execute("SELECT count(*) FROM llm_calls").fetchall()
                time.sleep(0.004)  # the two reads overlap: never a moment without one
                reader.execute("COMMIT")
        finally:
            reader.close()

    readers = [threading.Thread(target=read, args=(d,)) for d in (0.0, 0.002)]
    for t in readers:
        t.start()
    time.sleep(0.05)
    fid, peak = _file(writer), 0
    try:
        for i in range(300):
            _commit_calls(writer, fid, i)
            peak = max(peak, os.stat(f"{db}-wal").st_size)
    finally:
        stop.set()
        for t in readers:
            t.join()
        conn.close()
    return peak


def test_readers_that_never_pause_do_not_grow_the_wal_without_bound(tmp_path):
    limit = 256 * 1024
    unbounded = _wal_peak(tmp_path, "unbounded", wal_limit=2**62)
    assert unbounded > 8 * limit  # the readers do starve the checkpoints
    # A restart can wait in vain for a reader and is tried again a little later: near the limit,
    # never growing with what was written. The readers are threads of this process: on a loaded
    # machine the scheduler can keep one of them in its read through every restart of a run, so the
    # bound is what the better of two runs shows.
    bounded = min(_wal_peak(tmp_path, f"bounded-{i}", wal_limit=limit) for i in range(2))
    assert bounded < unbounded / 3


def test_a_read_left_open_costs_the_writer_waits_that_grow_then_space_out(tmp_path, monkeypatch):
    """A reader that never ends its read (a dashboard left in a transaction) defeats every WAL
    restart. Commits go on; each failed restart waits longer than the one before, up to the last
    step, and the next comes WAL_RETRY_FACTOR times that wait later, so waiting stays a fraction
    of the writer's time. Once the read ends, the next attempt succeeds and the WAL starts over."""
    monkeypatch.setattr(writer_module, "WAL_RESTART_WAITS_MS", (0, 5, 20))
    attempts: list[tuple[float, float, int, bool]] = []  # (began, ended, wait, succeeded)
    restart = writer_module.restart_wal

    def recorded(conn, wait_ms):
        began = time.monotonic()
        ok = restart(conn, wait_ms)
        attempts.append((began, time.monotonic(), wait_ms, ok))
        return ok

    monkeypatch.setattr(writer_module, "restart_wal", recorded)
    db = tmp_path / "ledger.db"
    writer = LedgerWriter(open_writer(db), wal_limit=64 * 1024)
    fid = _file(writer)
    reader = open_reader(db)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM llm_calls").fetchall()
    i = 0
    while len(attempts) < 6:
        _commit_calls(writer, fid, i)
        i += 1
    assert [(wait, ok) for _, _, wait, ok in attempts] == [(0, False), (5, False)] + [(20, False)] * 4
    for (_, ended, wait, _), (began, _, _, _) in zip(attempts, attempts[1:]):
        assert began - ended >= max(writer_module.WAL_RETRY_MIN_S, writer_module.WAL_RETRY_FACTOR * wait / 1000)
    reader.execute("COMMIT")
    while not attempts[-1][3]:
        _commit_calls(writer, fid, i)
        i += 1
    assert attempts[-1][2] == 20  # the ladder stays at its top until a restart succeeds
    size = os.stat(f"{db}-wal").st_size
    for _ in range(5):
        _commit_calls(writer, fid, i)
        i += 1
    assert os.stat(f"{db}-wal").st_size == size  # written again from its start, not appended to
    assert scalar(db, "SELECT count(*) FROM llm_calls") == i * 100
    reader.close()
    writer.conn.close()


def test_commits_leave_wal_checkpoints_to_a_thread_of_their_own(tmp_path):
    db = tmp_path / "ledger.db"
    conn = open_writer(db)
    writer = LedgerWriter(conn, background_checkpoints=True)
    page = conn.execute("PRAGMA page_size").fetchall()[0][0]
    start = os.stat(db).st_size
    fid = _file(writer)
    # The thread held back: past SQLite's automatic threshold (1,000 frames of a page and a 24-byte
    # header, after the WAL's 32-byte header), no commit copied a page back.
    writer.checkpointer.pages = 10**9
    i = 0
    while os.stat(f"{db}-wal").st_size <= 1000 * (page + 24) + 32:
        _commit_calls(writer, fid, i)
        i += 1
    assert os.stat(db).st_size == start
    assert writer.checkpointer.checkpoints == 0
    # Let go, the thread copies the WAL back while the writer goes on committing.
    writer.checkpointer.pages = 10
    for _ in range(20):
        _commit_calls(writer, fid, i)
        i += 1
    wait_for(lambda: os.stat(db).st_size > start, timeout=10, what="the database file to grow")
    assert writer.checkpointer.checkpoints > 0
    writer.close()
    assert "wal-checkpoints" not in {t.name for t in threading.enumerate()}
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchall() == [(1000,)]  # the connection's own, back
    conn.close()
    assert not os.path.exists(f"{db}-wal")  # closed last, the writer folded the WAL in
    assert scalar(db, "SELECT count(*) FROM llm_calls") == i * 100


def _maybe(values: list) -> st.SearchStrategy:
    return st.none() | st.sampled_from(values)


@st.composite
def _tool_lines(draw, start_id: int, end_id: int) -> list:
    """A start and an end of call c in run r, each with or without its optional fields."""
    common = dict(source="oc-telemetry", run_id="r", tool_call_id="c")

    def shared() -> dict:
        return dict(tool_name=draw(_maybe(["read", "exec"])), agent_id=draw(_maybe(["main", "work"])),
                    session_key=draw(_maybe(["agent:main:a", "agent:main:b"])),
                    session_id=draw(_maybe(["s1", "s2"])), branch=draw(_maybe(["b1", "b2"])))

    start = ToolStarted(event_id=start_id, ts_ms=draw(st.integers(1_000, 1_100)), kind="tool.start", **common,
                        **shared())
    end = ToolEnded(event_id=end_id, ts_ms=draw(st.integers(1_000, 1_200)), kind="tool.end", **common, **shared(),
                    is_error=draw(st.booleans()), duration_ms=draw(_maybe([0, 40, 700])),
                    error=draw(_maybe(["boom"])), file_path=draw(_maybe(["/a", "/b"])),
                    exec_command=draw(_maybe(["ls", "make"])), exit_code=draw(_maybe([0, 2])))
    return draw(st.permutations([start, end]))


def _ledger_of(path, batches: list[list]) -> dict:
    conn = open_writer(path)
    writer = LedgerWriter(conn)
    fid, offset = _file(writer), 0
    for facts in batches:
        items = [(offset + 10 * k, 10, f) for k, f in enumerate(facts)]
        end = offset + 10 * len(facts)
        writer.apply(Batch(fid, "/r/events.jsonl", offset, end, len(facts), end, items))
        offset = end
    conn.close()
    assert verify(path) == []
    # Only the tool call: a session row keeps the first key its lines name, and the two ways of
    # writing them here see the lines in different orders.
    return dump(path, ("tool_calls",))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(earlier=_tool_lines(3, 4), earlier_kept=st.sampled_from(["none", "start", "end", "both"]),
       lines=_tool_lines(1, 2))
def test_a_call_started_and_ended_in_one_batch_is_the_row_a_start_then_an_end_leave(tmp_path_factory, earlier,
                                                                                   earlier_kept, lines):
    """Whatever an earlier batch left, and whichever comes first in the file: one batch holding a
    call's start and end gives the row that its start and then its end, written alone, give, and
    rollups that agree with the rows in both ledgers."""
    prior = [f for f in earlier if earlier_kept == "both" or f.kind == f"tool.{earlier_kept}"]
    tmp = tmp_path_factory.mktemp("pair")
    together = _ledger_of(tmp / "together.db", ([prior] if prior else []) + [lines])
    by_statement = sorted(prior, key=lambda f: f.kind != "tool.start") + sorted(lines, key=lambda f: f.kind != "tool.start")
    one_by_one = _ledger_of(tmp / "alone.db", [[f] for f in by_statement])
    assert together == one_by_one


def _tool_event(n: int, kind: str, data: dict, run: str | None) -> bytes:
    """A tool event as OpenClaw writes one (no sessionId), of ``run``; None: it has no runId at all."""
    line = orjson.loads(event(n, kind, {"toolName": "exec", "toolCallId": "tc1"} | data, session_id="unknown"))
    if run is None:
        del line["runId"]
    else:
        line["runId"] = run
    return orjson.dumps(line) + b"\n"


@pytest.mark.parametrize("named", [None, "unknown"], ids=["no-runId", "runId-unknown"])
@pytest.mark.parametrize("order", ["start-first", "end-first"])
@pytest.mark.parametrize("cut", [None, 2], ids=["one-ingest", "a-line-apart"])
def test_a_tool_end_that_names_no_run_ends_the_call_its_start_began(tmp_path, db, named, order, cut):
    """A tool.end's runId is optional, and "unknown" says none (FORMATS.md §1); its toolCallId pairs it with
    its start. Such an end made a second call, and the one its start began was left open and then interrupted."""
    model = {"model": "claude-sonnet-4-5", "provider": "anthropic"}
    start = _tool_event(2, "tool.start", {"params": {"command": "make"}}, "r1")
    end = _tool_event(3, "tool.end", {"isError": True, "durationMs": 10, "error": "exit 2"}, named)
    lines = [event(1, "run.start", model, run="r1"), *([start, end] if order == "start-first" else [end, start]),
             event(4, "run.end", model | {"stopReason": "stop"}, run="r1")]
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(lines[:cut]))
    ingest(db, tmp_path / "state")
    if cut is not None:
        logs.append(b"".join(lines[cut:]))
        ingest(db, tmp_path / "state")
    LogDir(tmp_path / "copy").append(b"".join(lines))
    ingest(db, tmp_path / "copy")  # a copy of the log changes nothing
    settle(db)
    u = usage(db)
    assert (u["tool_calls"], u["tool_errors"], u["interrupted_runs"]) == (1, 1, 0)
    assert [(t["tool_name"], t["status"], t["started_at"] is not None, t["duration_ms"])
            for t in cli_json(db, "run", "r1")["tool_calls_list"]] == [("exec", "error", True, 10)]
    assert verify(db) == []
