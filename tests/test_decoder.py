"""Behaviour of the oc-telemetry decoder (FORMATS.md §1): one line in, one fact or one reject out."""

from __future__ import annotations

import json
from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger import jsontext
from agentledger.facts import (
    Compaction,
    Fact,
    LlmCall,
    Marker,
    Message,
    RawEvent,
    Reject,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    SubagentEnded,
    SubagentSpawned,
    Tokens,
    ToolEnded,
    ToolStarted,
    UsageSnapshot,
)
from agentledger.sources.common import MAX_DURATION_MS, MAX_TIME_MS
from agentledger.sources.oc_telemetry import decode, opener

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TS = 1_760_000_000_123
EVT = "evt_0011223344556677"


def envelope(kind: str, data: dict | None = None, **fields) -> dict:
    env = {
        "id": EVT,
        "ts": TS,
        "seq": 7,
        "agentId": "unknown",
        "sessionKey": "unknown",
        "sessionId": "unknown",
        "kind": kind,
        "data": data if data is not None else {},
        "source": "hook",
    }
    env.update(fields)
    return env


def line(kind: str, data: dict | None = None, **fields) -> bytes:
    return orjson.dumps(envelope(kind, data, **fields))


def ok(raw: bytes, offset: int = 0) -> Fact:
    out = decode(raw, offset)
    assert not isinstance(out, Reject), out
    assert isinstance(out, Fact)
    return out


def rejected(raw: bytes, offset: int = 0) -> Reject:
    out = decode(raw, offset)
    assert isinstance(out, Reject), out
    assert out.offset == offset
    assert out.length == len(raw)
    assert out.head == raw[:200]
    assert out.reason
    return out


# -- one test per event kind -------------------------------------------------------------------


@pytest.mark.parametrize("path, folder", [
    ("/s/agents/work/telemetry/events.jsonl", "work"),
    ("/s/agents/work/telemetry/events.2026-10-01.jsonl", "work"),
    ("/s/agents/unknown/telemetry/events.jsonl", None),  # OpenClaw's placeholder names no agent
    ("/s/agents/work/logs/events.jsonl", None),
    ("/backup/telemetry/events.jsonl", None),  # a telemetry directory kept elsewhere
])
def test_a_line_naming_no_agent_carries_the_agent_its_folder_names(path, folder):
    decode_file = opener(path, lambda session, ts: None)
    fact = decode_file(line("llm.call", {"delta": {"input": 1}}, sessionKey="global"), 0)
    assert (fact.agent_id, fact.agent_folder) == (None, folder)
    named = decode_file(line("tool.start", {"toolCallId": "t1"}, agentId="ops"), 0)
    assert (named.agent_id, named.agent_folder) == ("ops", None)


def test_session_start_with_resumed_from():
    f = ok(line("session.start", {"sessionId": "s-2", "resumedFrom": "s-1"}, agentId="main", sessionId="s-2"))
    assert type(f) is SessionStarted
    assert f.kind == "session.start"
    assert f.source == "oc-telemetry"
    assert f.ts_ms == TS
    assert f.agent_id == "main"
    assert f.session_id == "s-2"
    assert f.session_key is None  # "unknown" is missing
    assert f.run_id is None
    assert f.resumed_from == "s-1"


def test_session_start_without_resumed_from():
    f = ok(line("session.start", {"sessionId": "s-2"}, agentId="main", sessionId="s-2"))
    assert type(f) is SessionStarted
    assert f.resumed_from is None


def test_session_start_takes_session_id_from_data_when_envelope_lacks_it():
    f = ok(line("session.start", {"sessionId": "s-9"}, agentId="main"))
    assert f.session_id == "s-9"


def test_session_end():
    f = ok(line("session.end", {"sessionId": "s-2", "messageCount": 42, "durationMs": 90_000},
                agentId="main", sessionId="s-2"))
    assert type(f) is SessionEnded
    assert (f.agent_id, f.session_id, f.session_key) == ("main", "s-2", None)
    assert f.message_count == 42
    assert f.duration_ms == 90_000


def test_run_start():
    data = {"model": "claude-sonnet-4", "provider": "anthropic", "isHeartbeat": True, "isFollowup": False,
            "messageCount": 3, "compactionCount": 0, "originChannel": "telegram", "inputMessage": "hi"}
    f = ok(line("run.start", data, agentId="main", sessionKey="agent:main:main", sessionId="s-1", runId="r-1"))
    assert type(f) is RunStarted
    assert (f.agent_id, f.session_key, f.session_id, f.run_id) == ("main", "agent:main:main", "s-1", "r-1")
    assert f.model == "claude-sonnet-4"
    assert f.provider == "anthropic"
    assert f.is_heartbeat is True
    assert f.is_followup is False
    assert f.origin_channel == "telegram"


def test_run_end_usage_and_stop_reason():
    data = {"model": "gpt-5", "provider": "openai", "durationMs": 1234,
            "usage": {"input": 100, "output": 20, "cacheRead": 300, "cacheWrite": 4, "total": 424},
            "toolCallCount": 2, "toolNames": ["read", "exec"], "stopReason": "stop", "compactionCount": 0}
    f = ok(line("run.end", data, agentId="main", sessionKey="agent:main:main", sessionId="s-1", runId="r-1"))
    assert type(f) is RunEnded
    assert f.run_id == "r-1"
    assert f.model == "gpt-5"
    assert f.provider == "openai"
    assert f.duration_ms == 1234
    assert f.usage == Tokens(input=100, output=20, cache_read=300, cache_write=4, total=424)
    assert f.tool_call_count == 2
    assert f.stop_reason == "stop"
    assert f.error is None


def test_run_end_error_message_from_envelope():
    f = ok(line("run.end", {"usage": {"input": 1, "output": 0}}, runId="r-1",
                error={"message": "rate limited (429)"}))
    assert type(f) is RunEnded
    assert f.error == "rate limited (429)"


def test_llm_call_tokens_come_from_delta_never_cumulative():
    data = {
        "callIndex": 3, "provider": "anthropic", "model": "claude-opus-4",
        "delta": {"input": 10, "output": 250, "cacheRead": 12_000, "cacheWrite": 400, "total": 12_660},
        "cumulative": {"input": 999_999, "output": 999_999, "cacheRead": 999_999, "cacheWrite": 999_999,
                       "total": 3_999_996},
        "context": {"limit": 200_000, "used": 50_000},
        "costUsd": 0.0535305, "durationMs": 4200,
    }
    f = ok(line("llm.call", data, sessionKey="agent:main:main", sessionId="s-1", runId="r-1"))
    assert type(f) is LlmCall
    assert f.tokens == Tokens(input=10, output=250, cache_read=12_000, cache_write=400, total=12_660)
    assert f.cost_pico == 53_530_500_000
    assert isinstance(f.cost_pico, int)
    assert f.call_index == 3
    assert f.provider == "anthropic"
    assert f.model == "claude-opus-4"
    assert f.duration_ms == 4200
    assert f.run_id == "r-1"
    assert f.session_id == "s-1"


def test_llm_call_total_defaults_to_sum_of_parts():
    f = ok(line("llm.call", {"delta": {"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4}}))
    assert type(f) is LlmCall
    assert f.tokens.total == 10


@pytest.mark.parametrize(
    ("cost", "pico"),
    [
        (0.0535305, 53_530_500_000),
        (0, 0),
        (1, 10**12),
        (0.000001, 1_000_000),
        (1e-12, 1),
        (0.1, 100_000_000_000),
        (12.345678901234, 12_345_678_901_234),
        (1000, 1000 * 10**12),
        (1000.01, None),  # garbage: ten calls of a million dollars overflowed the ledger's sums
        (10**6, None),
    ],
)
def test_llm_call_cost_is_exact_integer_pico_usd(cost, pico):
    f = ok(line("llm.call", {"delta": {}, "costUsd": cost}))
    assert f.cost_pico == pico
    assert type(f.cost_pico) is (int if pico is not None else type(None))


@given(pico=st.integers(min_value=0, max_value=1000 * 10**12))
@settings(max_examples=300)
def test_llm_call_cost_with_up_to_12_decimals_is_exact(pico):
    text = str(Decimal(pico).scaleb(-12).normalize())
    if "E" in text:  # keep the plain notation a JS producer writes for these values
        text = format(Decimal(pico).scaleb(-12), "f")
    raw = b'{"id":"%s","ts":1,"kind":"llm.call","data":{"delta":{},"costUsd":%s}}' % (
        EVT.encode(), text.encode())
    f = ok(raw)
    assert f.cost_pico == pico


@pytest.mark.parametrize(("kind", "tokens"), [("llm.call", "delta"), ("usage.snapshot", "usage")])
def test_a_zero_cost_beside_tokens_is_no_cost(kind, tokens):
    # OpenClaw writes 0 for a model it cannot price (FORMATS.md §2): no free call, an unknown cost.
    assert ok(line(kind, {tokens: {"input": 100, "total": 100}, "costUsd": 0})).cost_pico is None
    assert ok(line(kind, {tokens: {}, "costUsd": 0})).cost_pico == 0  # a call that used nothing cost nothing


def test_llm_call_without_cost_has_no_cost():
    f = ok(line("llm.call", {"delta": {"input": 5}}))
    assert f.cost_pico is None


@pytest.mark.parametrize("cost", [-0.01, "-0.01", "0.05 USD", " 0.05", "$0.05", "1000.01", True, None, [0.1],
                                  {"usd": 1}])
def test_llm_call_unusable_cost_is_missing_not_zero(cost):
    f = ok(line("llm.call", {"delta": {"input": 5}, "costUsd": cost}))
    assert f.cost_pico is None


def test_usage_snapshot():
    data = {"provider": "openai", "model": "gpt-5",
            "usage": {"input": 1000, "output": 200, "cacheRead": 50, "cacheWrite": 0, "total": 1250},
            "lastCallUsage": {"input": 1}, "costUsd": 0.25}
    f = ok(line("usage.snapshot", data, sessionKey="agent:main:main", sessionId="s-1"))
    assert type(f) is UsageSnapshot
    assert f.tokens == Tokens(input=1000, output=200, cache_read=50, cache_write=0, total=1250)
    assert f.cost_pico == 250_000_000_000
    assert f.run_id is None
    assert (f.provider, f.model) == ("openai", "gpt-5")


def test_llm_input_and_output_are_markers():
    for kind in ("llm.input", "llm.output"):
        f = ok(line(kind, {"provider": "p", "model": "m", "prompt": "x", "imagesCount": 0}, runId="r-1"))
        assert type(f) is Marker
        assert f.kind == kind
        assert f.run_id == "r-1"


def test_tool_start():
    f = ok(line("tool.start", {"toolName": "read", "toolCallId": "call_1", "params": {"path": "/x"}},
                agentId="main", sessionKey="agent:main:main", runId="r-1"))
    assert type(f) is ToolStarted
    assert f.tool_name == "read"
    assert f.tool_call_id == "call_1"
    assert (f.agent_id, f.session_key, f.run_id, f.session_id) == ("main", "agent:main:main", "r-1", None)
    assert (f.file_path, f.exec_command) == ("/x", None)  # what its params ask for


def test_tool_start_names_the_command_its_params_ask_for():
    f = ok(line("tool.start", {"toolName": "exec", "toolCallId": "call_4", "params": {"command": "pytest -q",
                                                                                     "workdir": "/home/u/app"}}))
    assert (f.file_path, f.exec_command) == (None, "pytest -q")


def test_tool_end_success_with_file_path():
    data = {"toolName": "write", "toolCallId": "call_2", "isError": False, "durationMs": 31,
            "result": "ok", "filePath": "/home/u/notes.md"}
    f = ok(line("tool.end", data, agentId="main", sessionKey="agent:main:main", runId="r-1"))
    assert type(f) is ToolEnded
    assert f.tool_call_id == "call_2"
    assert f.tool_name == "write"
    assert f.is_error is False
    assert f.error is None
    assert f.duration_ms == 31
    assert f.file_path == "/home/u/notes.md"


def test_tool_end_error():
    data = {"toolName": "exec", "toolCallId": "call_3", "isError": True, "durationMs": 5,
            "error": "command not found: foo", "execCommand": "foo --bar"}
    f = ok(line("tool.end", data, runId="r-1"))
    assert type(f) is ToolEnded
    assert f.is_error is True
    assert f.error == "command not found: foo"
    assert f.exec_command == "foo --bar"
    assert f.file_path is None


@pytest.mark.parametrize(("given", "kept"), [(31, 31), (31.9, 31), (0, 0), (-5, None), (2**63 - 1, None),
                                              (MAX_DURATION_MS, MAX_DURATION_MS), (MAX_DURATION_MS + 1, None)])
def test_implausible_durations_are_missing(given, kept):
    """The ledger sums durations: two values near 2**63 would overflow the sum."""
    for kind, data in (("tool.end", {"toolCallId": "c"}), ("llm.call", {}), ("run.end", {}),
                       ("session.end", {}), ("subagent.end", {"childSessionKey": "agent:main:subagent:x"})):
        f = ok(line(kind, {**data, "durationMs": given}))
        assert f.duration_ms == kept, kind


def test_subagent_spawn():
    data = {"childSessionKey": "agent:research:subagent:abc", "agentId": "research", "label": "dig",
            "mode": "run", "requester": "agent:main:main"}
    f = ok(line("subagent.spawn", data, sessionKey="agent:main:main", runId="r-1"))
    assert type(f) is SubagentSpawned
    assert f.child_session_key == "agent:research:subagent:abc"
    assert f.child_agent_id == "research"
    assert f.label == "dig"
    assert f.mode == "run"
    assert f.session_key == "agent:main:main"  # the parent
    assert f.agent_id == "main"  # the parent's agent, not the child's


def test_subagent_stop():
    data = {"childSessionKey": "agent:main:subagent:abc", "requesterSessionKey": "agent:main:main",
            "outcome": "ok", "reason": "done", "usage": {"input": 1}, "durationMs": 5000, "toolsUsed": 3}
    f = ok(line("subagent.stop", data, sessionKey="agent:main:subagent:abc", runId="r-2"))
    assert type(f) is SubagentEnded
    assert f.child_session_key == "agent:main:subagent:abc"
    assert f.outcome == "ok"
    assert f.reason == "done"
    assert f.duration_ms == 5000


def test_subagent_end():
    data = {"targetSessionKey": "agent:main:subagent:abc", "outcome": "timeout", "endedAt": TS + 5,
            "durationMs": 60_000, "model": "gpt-5-mini"}
    f = ok(line("subagent.end", data, sessionKey="agent:main:subagent:abc", runId="r-2"))
    assert type(f) is SubagentEnded
    assert f.child_session_key == "agent:main:subagent:abc"
    assert f.outcome == "timeout"
    assert f.ended_ms == TS + 5
    assert f.duration_ms == 60_000
    assert f.model == "gpt-5-mini"


def test_subagent_without_child_key_is_rejected():
    r = rejected(line("subagent.spawn", {"agentId": "research"}, sessionKey="agent:main:main"), 10)
    assert "subagent.spawn" in r.reason


def test_compaction_start():
    f = ok(line("compaction.start", {"messageCount": 80, "compactingCount": 60, "tokenCount": 150_000},
                agentId="main", sessionKey="agent:main:main"))
    assert type(f) is Compaction
    assert f.phase == "start"
    assert f.message_count == 80
    assert f.compacting_count == 60
    assert f.token_count == 150_000
    assert f.compacted_count is None


def test_compaction_end():
    f = ok(line("compaction.end", {"messageCount": 21, "compactedCount": 60},
                agentId="main", sessionKey="agent:main:main"))
    assert type(f) is Compaction
    assert f.phase == "end"
    assert f.message_count == 21
    assert f.compacted_count == 60


def test_message_inbound():
    data = {"from": "+15550001", "contentPreview": "hello there", "channel": "telegram", "accountId": "a1",
            "conversationId": "telegram:123", "timestamp": TS}
    f = ok(line("message.inbound", data, sessionKey="telegram:123"))
    assert type(f) is Message
    assert f.direction == "inbound"
    assert f.channel == "telegram"
    assert f.peer == "+15550001"
    assert f.preview == "hello there"
    assert f.session_key == "telegram:123"
    assert f.agent_id is None  # a conversation id is not an agent session key


def test_message_outbound():
    data = {"to": "+15550002", "contentPreview": "bye", "success": False, "error": "blocked by user",
            "channel": "whatsapp"}
    f = ok(line("message.outbound", data))
    assert type(f) is Message
    assert f.direction == "outbound"
    assert f.peer == "+15550002"
    assert f.preview == "bye"
    assert f.success is False
    assert f.error == "blocked by user"
    assert f.channel == "whatsapp"
    assert (f.agent_id, f.session_key, f.session_id, f.run_id) == (None, None, None, None)


# -- ids ---------------------------------------------------------------------------------------


def test_unknown_ids_are_missing():
    f = ok(line("run.start", {}, agentId="unknown", sessionKey="unknown", sessionId="unknown", runId="unknown"))
    assert (f.agent_id, f.session_key, f.session_id, f.run_id) == (None, None, None, None)


def test_agent_id_derived_from_session_key_when_unknown():
    f = ok(line("llm.call", {"delta": {"input": 1}}, agentId="unknown", sessionKey="agent:main:cron:x"))
    assert f.agent_id == "main"
    assert f.session_key == "agent:main:cron:x"


def test_explicit_agent_id_wins_over_session_key():
    f = ok(line("run.start", {}, agentId="ops", sessionKey="agent:main:main"))
    assert f.agent_id == "ops"


def test_evt_id_maps_to_signed_64_bit_int():
    f = ok(line("run.start", {}, id="evt_0011223344556677"))
    assert f.event_id == 0x0011223344556677
    g = ok(line("run.start", {}, id="evt_ffffffffffffffff"))
    assert g.event_id == -1
    h = ok(line("run.start", {}, id="evt_8000000000000000"))
    assert h.event_id == INT64_MIN


@pytest.mark.parametrize(("id_value", "expected"), [
    ("evt_ABCDEF0123456789", -0x543210FEDCBA9877),  # upper-case hex reads as lower-case
    ("evt_\u0663\u066300000000000000", 0x3300000000000000),  # digits of another script, as int() reads them
])
def test_evt_ids_keep_the_values_ledgers_already_hold(id_value, expected):
    # An event id is how a ledger knows a line it indexed: a copy read after an upgrade must get the same.
    assert ok(line("run.start", {}, id=id_value)).event_id == expected


def test_distinct_evt_ids_give_distinct_event_ids():
    ids = {ok(line("run.start", {}, id=f"evt_{i:016x}")).event_id for i in range(200)}
    assert len(ids) == 200


def test_same_line_always_gives_same_id():
    raw = line("tool.start", {"toolCallId": "c"}, id="evt_abcdef0123456789")
    assert decode(raw, 0).event_id == decode(raw, 999).event_id == decode(bytes(raw), 5).event_id


def test_same_evt_id_is_stable_across_copies_of_the_event():
    # A copy of the event (rotated file, copied log) keeps its id even if the offset differs.
    a = ok(line("run.start", {}, id="evt_abcdef0123456789"), 0)
    b = ok(line("run.start", {}, id="evt_abcdef0123456789"), 4096)
    assert a.event_id == b.event_id


_MISSING = object()


@pytest.mark.parametrize("id_value", [_MISSING, None, "", 12345, ["evt_0011223344556677"], "evt_xyz", "not-an-evt-id"])
def test_line_without_usable_id_gets_stable_id(id_value):
    env = envelope("run.start", {"model": "m"})
    if id_value is _MISSING:
        del env["id"]
    else:
        env["id"] = id_value
    raw = orjson.dumps(env)
    a, b = ok(raw, 0), ok(raw, 77)
    assert a.event_id == b.event_id
    assert INT64_MIN <= a.event_id <= INT64_MAX


def _lines_with_id(id_value, n=200):
    out = []
    for i in range(n):
        env = envelope("run.start", {"model": f"m{i}"})
        if id_value is _MISSING:
            del env["id"]
        else:
            env["id"] = id_value
        out.append(orjson.dumps(env))
    return out


@pytest.mark.parametrize("id_value", [_MISSING, None, 12345, [1]])
def test_lines_without_id_differ_by_content(id_value):
    ids = {ok(raw).event_id for raw in _lines_with_id(id_value)}
    assert len(ids) == 200


def test_empty_string_id_is_treated_as_missing():
    ids = {ok(raw).event_id for raw in _lines_with_id("", 20)}
    assert len(ids) == 20


def test_unknown_kind_becomes_raw_event_keeping_bytes():
    raw = line("browser.navigate", {"url": "https://example.com"}, agentId="main", runId="r-1")
    f = ok(raw, 123)
    assert type(f) is RawEvent
    assert f.kind == "browser.navigate"
    assert f.raw == raw
    assert f.agent_id == "main"
    assert f.run_id == "r-1"
    assert f.ts_ms == TS


# -- rejects -----------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"", b" ", b"\t  \r", b"\r"])
def test_blank_line_rejected(raw):
    r = rejected(raw, 50)
    assert "blank" in r.reason


def test_truncated_json_rejected():
    raw = line("run.start", {"model": "m"})[:-9]
    r = rejected(raw, 3)
    assert "invalid JSON" in r.reason


def test_invalid_utf8_rejected():
    raw = b'{"id":"evt_0011223344556677","ts":1,"kind":"run.start","data":{"model":"\xff\xfe"}}'
    r = rejected(raw, 8)
    assert "UTF-8" in r.reason


@pytest.mark.parametrize(("raw", "what"), [(b"[1,2,3]", "list"), (b"42", "int"), (b"3.5", "float"),
                                           (b'"run.start"', "str"), (b"null", "NoneType"), (b"true", "bool")])
def test_non_object_rejected(raw, what):
    r = rejected(raw, 0)
    assert "not a JSON object" in r.reason
    assert what in r.reason


@pytest.mark.parametrize("kind", [None, "", 5, ["run.start"], {"k": 1}, True])
def test_missing_kind_rejected(kind):
    env = envelope("x")
    if kind is None:
        del env["kind"]
    else:
        env["kind"] = kind
    r = rejected(orjson.dumps(env), 9)
    assert "kind" in r.reason


@pytest.mark.parametrize(
    "ts",
    ["missing", None, -1, -TS, "1760000000123", "yesterday", True, False, [TS], {"ms": TS},
     2**63, "huge", 1e300],
)
def test_bad_ts_rejected(ts):
    env = envelope("run.start")
    if ts == "missing":
        del env["ts"]
        raw = orjson.dumps(env)
    elif ts == "huge":
        raw = orjson.dumps(env).replace(b'"ts":%d' % TS, b'"ts":' + b"9" * 40)
    else:
        env["ts"] = ts
        raw = json.dumps(env).encode()
    r = rejected(raw, 11)
    assert "ts" in r.reason


@pytest.mark.parametrize("ts", [MAX_TIME_MS + 1, 100_000_000_000_000_000, 2**63 - 1, 1e17])
def test_a_ts_past_the_year_9999_is_rejected(ts):
    # Indexed, it made every query that prints times fail: "year 3170843 is out of range".
    assert "ts" in rejected(line("run.start", ts=ts)).reason
    assert ok(line("run.start", ts=MAX_TIME_MS)).ts_ms == MAX_TIME_MS


def test_a_subagent_end_time_no_date_can_show_is_no_end_time():
    data = {"targetSessionKey": "agent:main:subagent:x", "outcome": "ok"}
    assert ok(line("subagent.end", {**data, "endedAt": 10**17})).ended_ms is None
    assert ok(line("subagent.end", {**data, "endedAt": 1_790_000_000_000})).ended_ms == 1_790_000_000_000


def test_a_files_byte_order_mark_is_no_part_of_its_first_line():
    # A file saved with one lost its first event, rejected as "invalid UTF-8".
    bom = b"\xef\xbb\xbf"
    assert ok(bom + line("run.start")).kind == "run.start"
    r = rejected(bom + b'{"kind": "run.start", "ts": ', 7)
    assert r.reason.startswith("invalid JSON")


# What JS writes for a string cut inside an emoji (String.slice, then JSON.stringify): half a surrogate pair,
# escaped on its own. The stdlib reads such a line; orjson refused it, and the event was lost.
@pytest.mark.parametrize(("written", "read"), [
    (rb"party \ud83c", "party \ufffd"),  # a high half at the end
    (rb"\udf89 party", "\ufffd party"),  # a low half at the start
    (rb"a\uD83Db", "a\ufffdb"),  # upper-case hex, in the middle
    (rb"\ud83c\ud83c\udf89", "\ufffd\U0001f389"),  # a high half before a whole pair
    (rb"\ud83c\u0041", "\ufffdA"),  # a high half before an escape that is no low half
    (rb"\udf89\ud83c", "\ufffd\ufffd"),  # a pair the wrong way round
    (rb"\\ud83c", "\\ud83c"),  # an escaped backslash: no escape, text as it is
])
def test_a_lone_surrogate_escape_is_read_as_the_replacement_character(written, read):
    raw = line("tool.end", {"toolName": "exec", "toolCallId": "c1", "isError": True, "error": "MARK",
                            "result": "MARK"}).replace(b"MARK", written)
    f = ok(raw)
    assert (type(f), f.is_error, f.error) == (ToolEnded, True, read)
    assert f.error.encode("utf-8")  # text SQLite and --json can hold


def test_a_lone_surrogate_escape_in_a_key_or_the_envelope_is_read_as_the_replacement_character():
    raw = line("run.start", {"MARK": 1, "model": "m"}, sessionKey="agent:main:MARK").replace(b"MARK", rb"x\ud800")
    f = ok(raw)
    assert (type(f), f.session_key, f.agent_id) == (RunStarted, "agent:main:x\ufffd", "main")


@pytest.mark.parametrize(("broken", "what"), [
    (b'"result":"\\ud83c",}', "invalid JSON"),  # a lone half, and a real fault after it
    (b'"result":"\\ud83c\\Ud83c"}', "invalid JSON"),  # \U is no JSON escape
    (b'"result":"\xed\xa0\xbc"}', "invalid UTF-8"),  # a surrogate's raw bytes: UTF-8 has none
])
def test_a_line_with_a_lone_surrogate_escape_and_a_real_fault_is_still_rejected(broken, what):
    raw = b'{"id":"%s","ts":1,"kind":"tool.end","data":{"toolName":"exec","toolCallId":"c1",%s}' % (
        EVT.encode(), broken)
    r = rejected(raw, 4)
    with pytest.raises(orjson.JSONDecodeError) as refused:
        orjson.loads(raw.replace(rb"\ud83c", rb"\ufffd"))
    # The reason orjson gives for the fault itself, at its column in the line.
    assert r.reason == f"{what}: {refused.value}"


_JSON_STRINGS = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"]), st.sampled_from("\\u\"")))
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False) | _JSON_STRINGS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_JSON_STRINGS, inner, max_size=4),
    max_leaves=12)


def _replaced(value):
    """The stdlib's parse, with each surrogate it kept (half of no pair) as U+FFFD."""
    if isinstance(value, str):
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
    if isinstance(value, list):
        return [_replaced(v) for v in value]
    if isinstance(value, dict):
        return {_replaced(k): _replaced(v) for k, v in value.items()}
    return value


@given(value=_JSON_VALUES, ascii_only=st.booleans())
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_any_json_text_with_lone_surrogate_escapes_reads_as_the_stdlib_reads_it_with_replacement_characters(
        value, ascii_only):
    # Surrogates in the strings are written as escapes, whether the rest is escaped (ensure_ascii) or UTF-8.
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "backslashreplace")
    assert jsontext.loads(raw) == _replaced(json.loads(raw))


def test_negative_fractional_ts_rejected():
    r = rejected(b'{"kind":"run.start","ts":-0.5}', 0)
    assert "ts" in r.reason


@pytest.mark.parametrize("kind", ["tool.start", "tool.end"])
@pytest.mark.parametrize("call_id", ["missing", "", "unknown", 17, None])
def test_tool_event_without_tool_call_id_rejected(kind, call_id):
    data = {"toolName": "read"}
    if call_id != "missing":
        data["toolCallId"] = call_id
    r = rejected(line(kind, data, runId="r-1"), 64)
    assert kind in r.reason


# -- sloppy types never raise ------------------------------------------------------------------


def test_wrong_types_in_llm_call_become_missing_values():
    data = {"callIndex": True, "provider": 5, "model": ["x"],
            "delta": {"input": "12 ", "output": [1, [2]], "cacheRead": True, "cacheWrite": {"a": 1}, "total": None},
            "cumulative": "lots", "costUsd": "0.05$", "durationMs": "5ms"}
    f = ok(line("llm.call", data))
    assert type(f) is LlmCall
    assert f.tokens == Tokens()
    assert f.cost_pico is None
    assert (f.call_index, f.provider, f.model, f.duration_ms) == (None, None, None, None)


@pytest.mark.parametrize("usage", ["lots", [1, 2], 5, None, [[{"input": 1}]], {"input": -5, "output": -1}])
def test_wrong_usage_shapes_give_zero_tokens(usage):
    f = ok(line("run.end", {"usage": usage}))
    assert f.usage == Tokens()


def test_huge_and_out_of_range_counts_never_raise():
    raw = (b'{"ts":1,"kind":"llm.call","data":{"delta":{"input":' + b"9" * 40 + b',"output":18446744073709551616,'
           b'"cacheRead":9223372036854775808,"cacheWrite":1e308,"total":-1e308},"callIndex":' + b"1" * 30 +
           b',"durationMs":-9223372036854775809}}')
    f = ok(raw)
    assert f.tokens == Tokens()
    assert f.call_index is None
    assert f.duration_ms is None


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_nan_like_numbers_are_rejected_not_raised(value):
    raw = b'{"ts":1,"kind":"llm.call","data":{"delta":{"input":1},"costUsd":' + value + b"}}"
    r = rejected(raw, 0)
    assert "JSON" in r.reason


@pytest.mark.parametrize("value", ["NaN", "Infinity", "nan", "-inf"])
def test_nan_like_strings_are_missing_values(value):
    f = ok(line("llm.call", {"delta": {"input": value}, "costUsd": value, "durationMs": value}))
    assert f.tokens == Tokens()
    assert f.cost_pico is None
    assert f.duration_ms is None


def test_wrong_types_in_run_end_and_tool_end():
    f = ok(line("run.end", {"durationMs": "12s", "toolCallCount": True, "stopReason": 7, "model": {}},
                error={"message": 5}))
    assert (f.duration_ms, f.tool_call_count, f.stop_reason, f.model, f.error) == (None, None, None, None, None)
    g = ok(line("tool.end", {"toolCallId": "c", "isError": "true", "filePath": 3, "toolName": {},
                             "error": ["x"], "durationMs": [1]}))
    assert type(g) is ToolEnded
    assert g.is_error is False  # only a JSON true is an error flag
    assert (g.file_path, g.tool_name, g.error, g.duration_ms) == (None, None, None, None)


@pytest.mark.parametrize(("given", "kept"), [
    ("1000", 1000), ("+1000", 1000), ("0001000", 1000), ("1e3", 1000), ("1000.9", 1000), ("1.5E3", 1500),
    ("0", 0), ("-5", 0), ("1000000001", 0),  # counts keep their range written either way
    (" 1000", 0), ("1000 ", 0), ("1000\n", 0), ("1_000", 0), ("1,000", 0), ("0x10", 0), ("\u0661\u0660", 0),
    ("1.", 0), (".5", 0), ("1e", 0), ("", 0), ("nan", 0), ("inf", 0), ("1e400", 0), ("1" * 41, 0),
])
def test_counts_written_as_plain_decimal_strings_are_read(given, kept):
    f = ok(line("llm.call", {"delta": {"input": given}}))
    assert f.tokens.input == kept
    assert type(f.tokens.input) is int


@pytest.mark.parametrize(("cost", "pico"), [("0.01", 10**10), ("0.0535305", 53_530_500_000), ("1e-2", 10**10),
                                            ("0", 0), ("1000", 1000 * 10**12)])
def test_costs_written_as_plain_decimal_strings_are_read(cost, pico):
    f = ok(line("llm.call", {"delta": {"input": 0}, "costUsd": cost}))
    assert f.cost_pico == pico


@given(n=st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False, allow_infinity=False))
@settings(max_examples=300)
def test_a_number_written_as_a_string_reads_as_the_number(n):
    written = json.dumps(n)  # the text a producer quoting the number would write
    # json (not orjson) so numbers past 64 bits reach the decoder as a producer might write them.
    as_number, as_text = (ok(json.dumps(envelope("run.end", {"durationMs": v, "toolCallCount": v,
                                                             "usage": {"input": v}})).encode()) for v in (n, written))
    assert (as_text.duration_ms, as_text.tool_call_count, as_text.usage) == (
        as_number.duration_ms, as_number.tool_call_count, as_number.usage)


@given(pico=st.integers(min_value=0, max_value=1000 * 10**12))
@settings(max_examples=300)
def test_a_cost_written_as_a_string_reads_as_the_number(pico):
    written = format(Decimal(pico).scaleb(-12), "f")
    assert ok(line("llm.call", {"costUsd": written})).cost_pico == pico


def test_booleans_are_never_counts():
    f = ok(line("session.end", {"messageCount": True, "durationMs": False}))
    assert (f.message_count, f.duration_ms) == (None, None)
    g = ok(line("compaction.start", {"messageCount": True, "compactingCount": False, "tokenCount": True}))
    assert (g.message_count, g.compacting_count, g.token_count) == (None, None, None)


@pytest.mark.parametrize("data", ["text", [1, 2], 5, None, True, [[["deep"]]]])
def test_non_object_data_is_treated_as_empty(data):
    env = envelope("run.start", agentId="main")
    env["data"] = data
    f = ok(orjson.dumps(env))
    assert type(f) is RunStarted
    assert f.model is None
    assert f.agent_id == "main"


def test_wrong_types_in_envelope_ids_are_missing():
    f = ok(line("run.start", {}, agentId=5, sessionKey=["agent:main:main"], sessionId={}, runId=1.5))
    assert (f.agent_id, f.session_key, f.session_id, f.run_id) == (None, None, None, None)


def test_cost_pico_fits_in_signed_64_bit():
    f = ok(line("llm.call", {"delta": {"input": 1}, "costUsd": 1e8}))
    assert f.cost_pico is None or INT64_MIN <= f.cost_pico <= INT64_MAX


def test_token_total_fits_in_signed_64_bit():
    f = ok(line("llm.call", {"delta": {"input": INT64_MAX, "output": INT64_MAX}}))
    assert INT64_MIN <= f.tokens.total <= INT64_MAX


# -- properties --------------------------------------------------------------------------------


def check_shape(out, raw: bytes, offset: int) -> None:
    assert isinstance(out, (Fact, Reject))
    if isinstance(out, Reject):
        assert out.offset == offset
        assert out.length == len(raw)
        assert out.head == raw[:200]
        assert isinstance(out.reason, str) and out.reason
    else:
        assert INT64_MIN <= out.event_id <= INT64_MAX
        assert isinstance(out.ts_ms, int) and out.ts_ms >= 0
        assert isinstance(out.kind, str) and out.kind
        for name in ("agent_id", "session_key", "session_id", "run_id"):
            value = getattr(out, name)
            assert value is None or (isinstance(value, str) and value and value != "unknown")
        if isinstance(out, RawEvent):
            assert out.raw == raw


@given(raw=st.binary(max_size=300), offset=st.integers(min_value=0, max_value=2**40))
@settings(max_examples=300)
def test_decode_arbitrary_bytes_never_raises(raw, offset):
    check_shape(decode(raw, offset), raw, offset)


_scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
            | st.sampled_from(["unknown", "", "evt_0011223344556677", "evt_zzzzzzzzzzzzzzzz", "agent:main:cron:x",
                               "agent:", "agent::x", "NaN", "1700000000000"]))
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_data_keys = st.sampled_from([
    "sessionId", "resumedFrom", "messageCount", "durationMs", "model", "provider", "isHeartbeat", "isFollowup",
    "originChannel", "usage", "toolCallCount", "stopReason", "callIndex", "delta", "cumulative", "costUsd",
    "toolName", "toolCallId", "isError", "error", "filePath", "execCommand", "childSessionKey", "agentId",
    "label", "mode", "targetSessionKey", "outcome", "reason", "endedAt", "compactingCount", "tokenCount",
    "compactedCount", "from", "to", "contentPreview", "channel", "success",
])
_usage = st.dictionaries(st.sampled_from(["input", "output", "cacheRead", "cacheWrite", "total"]), _json)
_data = st.dictionaries(_data_keys, _json | _usage, max_size=8) | _json
_kinds = st.sampled_from([
    "session.start", "session.end", "run.start", "run.end", "llm.input", "llm.output", "llm.call",
    "usage.snapshot", "tool.start", "tool.end", "message.inbound", "message.outbound", "subagent.spawn",
    "subagent.stop", "subagent.end", "compaction.start", "compaction.end", "future.kind",
])
_other_keys = {
    "id": _json | st.from_regex(r"\Aevt_[0-9a-fA-F]{16}\Z"),
    "seq": _json,
    "agentId": _json,
    "sessionKey": _json,
    "sessionId": _json,
    "runId": _json,
    "data": _data,
    "error": _json | st.fixed_dictionaries({"message": _json}),
    "source": _json,
    "blobRefs": _json,
}
# Mostly a known kind and a usable ts, so most examples reach the per-kind builders with sloppy fields;
# sometimes any subset of the envelope with any types at all.
_good_envelopes = st.fixed_dictionaries(
    {"kind": _kinds, "ts": st.integers(min_value=0, max_value=MAX_TIME_MS)}, optional=_other_keys)
_any_envelopes = st.fixed_dictionaries({}, optional={**_other_keys, "kind": _kinds | _json, "ts": _json})
_envelopes = st.sampled_from([_good_envelopes, _good_envelopes, _any_envelopes]).flatmap(lambda s: s)


@given(env=_envelopes, ascii_only=st.booleans(), offset=st.integers(min_value=0, max_value=2**40))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_decode_arbitrary_envelopes_never_raises(env, ascii_only, offset):
    # json (not orjson) so big ints, NaN/Infinity and lone surrogates reach the decoder as producers might write them.
    raw = json.dumps(env, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    out = decode(raw, offset)
    check_shape(out, raw, offset)
    if isinstance(out, Fact):
        assert out.kind == env["kind"]
        assert out.ts_ms == int(env["ts"])
