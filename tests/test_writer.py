"""The ledger writer: one transaction per batch, idempotent, and one bad value costs one line."""

from __future__ import annotations

import pytest
from ledgerdump import scalar
from logwriter import LogDir, llm_call
from conftest import ingest

from agentledger.facts import LlmCall, Tokens
from agentledger.ledger.db import open_writer
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


def _file(writer: LedgerWriter) -> int:
    return writer.add_file("oc-telemetry", "/r", "/r/events.jsonl", b"fp", 1, 2, 0, "live").id


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
